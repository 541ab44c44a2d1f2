r"""Monte Carlo rho_i and attention entropy over eigen-(mean, scale): paper Fig. 5.

  python launch/simulate.py --config configs/simulate_rho.py --workdir /tmp/exp_runs/simulate_rho

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_draws=3`). See configs/simulate_rho.py.
"""
from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from qkspec.experiments import simulation

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a simulate_rho config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for figures, tables and config.json.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("simulate_rho config:\n%s", _CONFIG.value)
  simulation.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
