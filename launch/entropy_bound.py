r"""The attention-entropy lower bound Eq. (9) vs nu: paper Fig. 4.

  python launch/entropy_bound.py --config configs/entropy_bound.py --workdir /tmp/exp_runs/entropy_bound

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.nu_max=20`). See configs/entropy_bound.py.
"""
from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from qkspec.experiments import entropy_bound

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to an entropy_bound config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for figures, tables and config.json.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("entropy_bound config:\n%s", _CONFIG.value)
  entropy_bound.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
