r"""The main job: every figure that needs no data set (README's first command).

  python launch/demo.py --workdir runs/demo
  python launch/demo.py --workdir /tmp/demo --smoke          # seconds
  python launch/demo.py --workdir /tmp/demo --only=simulate_rho

See `qkspec.cli.demo` for what runs.
"""
import pathlib

from absl import app
from absl import flags

from qkspec import cli

_WORKDIR = flags.DEFINE_string("workdir", "runs/demo",
                               "Directory for figures, tables and configs.")
_SMOKE = flags.DEFINE_bool("smoke", False, "Tiny configs (a test run).")
_ONLY = flags.DEFINE_list("only", list(cli.DEMO),
                          "Which experiments to run.")
flags.register_validator(
    "only", lambda names: set(names) <= set(cli.DEMO),
    f"--only takes experiments of {', '.join(cli.DEMO)}")
_CONFIGS = pathlib.Path(__file__).resolve().parents[1] / "configs"


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  cli.quiet_tpu_probe()
  cli.demo(_WORKDIR.value, str(_CONFIGS), _SMOKE.value, tuple(_ONLY.value))


if __name__ == "__main__":
  app.run(main)
