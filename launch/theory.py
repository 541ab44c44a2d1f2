r"""Analytic rho(theta), Lemma 2 table: paper Figs. 2-3.

  python launch/theory.py --config configs/theory_rho.py --workdir /tmp/exp_runs/theory_rho

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.num_theta=201`). See configs/theory_rho.py.
"""
from qkspec.experiments import cli
from qkspec.experiments import theory_rho

if __name__ == "__main__":
  cli.main(theory_rho.run, "theory_rho config")
