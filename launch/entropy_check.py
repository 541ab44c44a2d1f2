r"""Measured attention entropy vs Eq. (9) and Zhai et al. Theorem 3.1.

  python launch/entropy_check.py --config configs/entropy_check.py --workdir /tmp/collapse_runs/entropy_check

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.dim=32`). See configs/entropy_check.py.
"""
from qkspec.experiments import cli
from qkspec.experiments import entropy_check

if __name__ == "__main__":
  cli.main(entropy_check.run, "entropy_check config")
