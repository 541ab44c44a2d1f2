r"""Runs one experiment; the config names it (`config.experiment`).

  python launch/run.py --config configs/simulate_rho.py \
      --workdir runs/simulate_rho
  python launch/run.py --config configs/rank_collapse.py:smoke --workdir /tmp/rc

configs/<id>.py runs qkspec/experiments/<id>.py. Add `:smoke` to the config
path for a seconds-long run and `--config.x=y` to override a field;
`--print_config` prints the resolved config and exits. Each config's
docstring has its command, what it writes and what the paper shows.
Training configs also work here (launch/train.py's trainer, then figures).
"""
import pathlib

from qkspec import cli
from qkspec.experiments import runner

if __name__ == "__main__":
  cli.main(runner.run, runner.check,
           pathlib.Path(__file__).resolve().parents[1] / "configs",
           training_only=False)
