r"""rho_i and attention entropy on a dense eigen-(mean, scale) grid (Fig. 5 extended).

  python launch/simulate_grid.py --config configs/simulate_grid.py --workdir /tmp/exp_runs/simulate_grid

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_means=32`). See configs/simulate_grid.py.
"""
from qkspec.experiments import cli
from qkspec.experiments import simulate_grid

if __name__ == "__main__":
  cli.main(simulate_grid.run, "simulate_grid config")
