r"""Monte Carlo rho_i and attention entropy over eigen-(mean, scale): paper Fig. 5.

  python launch/simulate.py --config configs/simulate_rho.py --workdir /tmp/exp_runs/simulate_rho

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_draws=3`). See configs/simulate_rho.py.
"""
from qkspec.experiments import cli
from qkspec.experiments import simulate_rho

if __name__ == "__main__":
  cli.main(simulate_rho.run, "simulate_rho config")
