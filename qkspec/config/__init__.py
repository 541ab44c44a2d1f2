"""Config helpers for `configs/*.py`, importing ml_collections, not jax:
`args` the `--config file.py:smoke,L=3` grammar, `argv` the one parser of
a launch command's words, `usage` each command-line mistake in one line
and --help's list of configs, `defaults` the training configs,
`schema.validate` naming the bad key, `resume` what a resumed run may
change. Each raises `ConfigError` on a config that cannot run.
"""
from qkspec.config.errors import ConfigError

__all__ = ["ConfigError"]
