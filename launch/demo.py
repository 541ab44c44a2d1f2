r"""The main job: the paper's figures that need no data set (README's first
command): theory_rho (Figs. 2-3), entropy_bound (Fig. 4), simulate_rho
(Fig. 5) and theory_task (the Sec. 2 model with and without LocATER).

  python launch/demo.py --workdir runs/demo
  python launch/demo.py --workdir /tmp/demo --smoke          # seconds
  python launch/demo.py --workdir /tmp/demo --only=simulate_rho

The other experiments need no data set either; each runs with
launch/run.py (BUILD.md lists them). See `qkspec.experiments.demo`.
"""
import pathlib

from absl import flags

from qkspec import cli
from qkspec.experiments import demo

_WORKDIR = flags.DEFINE_string("workdir", "runs/demo",
                               "Directory for figures, tables and configs.")
_SMOKE = flags.DEFINE_bool("smoke", False, "Tiny configs (a test run).")
_ONLY = flags.DEFINE_list("only", list(demo.DEMO),
                          f"Which of {', '.join(demo.DEMO)} to run.")
_CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


def main():
  demo.run(_WORKDIR.value, _CONFIGS, _SMOKE.value, tuple(_ONLY.value))


if __name__ == "__main__":
  cli.command(main)
