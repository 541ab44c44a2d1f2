r"""Rank collapse per layer: SAN, +skip, +MLP, +LN, full block (Dong Fig. 1 style).

  python launch/collapse.py --config configs/rank_collapse.py --workdir /tmp/collapse_runs/rank_collapse

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_layers=12`). See configs/rank_collapse.py.
"""
from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from qkspec.experiments import collapse

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a rank_collapse config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for figures, tables and config.json.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("rank_collapse config:\n%s", _CONFIG.value)
  collapse.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
