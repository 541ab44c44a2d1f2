r"""The attention-entropy lower bound Eq. (9) vs nu: paper Fig. 4.

  python launch/entropy_bound.py --config configs/entropy_bound.py --workdir /tmp/exp_runs/entropy_bound

Add `:smoke` to the config path for a quick run, and `--config.x=y` to
override a field (e.g. `--config.nu_max=20`). See configs/entropy_bound.py.
"""
from qkspec.experiments import cli
from qkspec.experiments import entropy_bound

if __name__ == "__main__":
  cli.main(entropy_bound.run, "entropy_bound config")
