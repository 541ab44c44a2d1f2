r"""Measured attention entropy vs Eq. (9) and Zhai et al. Theorem 3.1.

  python launch/entropy_check.py --config configs/entropy_check.py --workdir /tmp/collapse_runs/entropy_check

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.dim=32`). See configs/entropy_check.py.
"""
from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from qkspec.experiments import entropy_check

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to an entropy_check config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for figures, tables and config.json.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("entropy_check config:\n%s", _CONFIG.value)
  entropy_check.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
