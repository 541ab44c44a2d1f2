r"""Rank collapse, entropy and rho of deep pure SANs over eigen-(mean, scale).

  python launch/spectrum_collapse.py --config configs/spectrum_collapse.py --workdir /tmp/collapse_runs/spectrum_collapse

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_draws=2`). See configs/spectrum_collapse.py.
"""
from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from qkspec.experiments import spectrum_collapse

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a spectrum_collapse config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for figures, tables and config.json.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("spectrum_collapse config:\n%s", _CONFIG.value)
  spectrum_collapse.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
