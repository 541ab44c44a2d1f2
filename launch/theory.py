r"""Analytic rho(theta), Lemma 2 table: paper Figs. 2-3.

  python launch/theory.py --config configs/theory_rho.py --workdir /tmp/exp_runs/theory_rho

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_theta=201`). See configs/theory_rho.py.
"""
from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from qkspec.experiments import theory

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a theory_rho config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for figures, tables and config.json.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("theory_rho config:\n%s", _CONFIG.value)
  theory.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
