"""README's main job: the paper's figures that need no data set, on a CPU.

`run(workdir, configs_dir)` runs `DEMO`: theory_rho (Figs. 2-3, Lemma 2),
entropy_bound (Fig. 4), simulate_rho (Fig. 5) and theory_task (the Sec. 2
model with and without LocATER). `OTHERS` need no data set either and run
one at a time with `launch/run.py`.
"""
import pathlib
import time

from absl import logging

from qkspec.config import ConfigError
from qkspec.config import args
from qkspec.experiments import EXPERIMENTS
from qkspec.experiments import runner

DEMO = ("theory_rho", "entropy_bound", "simulate_rho", "theory_task")
OTHERS = tuple(name for name in EXPERIMENTS if name not in DEMO)


def check(only: tuple[str, ...]) -> None:
  """Raises ConfigError unless every name of `only` is one of `DEMO`."""
  unknown = [name for name in only if name not in DEMO]
  if not unknown:
    return
  line = (f"--only={','.join(only)}: the demo runs {', '.join(DEMO)}, not "
          f"{', '.join(unknown)}")
  others = [name for name in unknown if name in OTHERS]
  if others:
    line += (f"; run {others[0]} with python launch/run.py --config "
             f"configs/{others[0]}.py --workdir DIR")
  raise ConfigError(line + ".")


def run(workdir: str, configs_dir: str | pathlib.Path, smoke: bool = False,
        only: tuple[str, ...] = DEMO) -> dict[str, list[str]]:
  """Runs the `DEMO` experiments `only`, each with `configs_dir/<id>.py`
  into `workdir/<id>/`, logging each one's time; prints where the figures
  went and returns {experiment: [its PNG paths]}."""
  check(only)
  root = pathlib.Path(workdir)
  figures = {}
  for i, name in enumerate(only, 1):
    start = time.time()
    logging.info("[%d/%d] %s ...", i, len(only), name)
    config = args.load_config_file(
        pathlib.Path(configs_dir) / f"{name}.py", "smoke" if smoke else None)
    runner.run(config, str(root / name))
    figures[name] = sorted(str(p) for p in (root / name).glob("*.png"))
    logging.info("[%d/%d] %s done in %.0f s", i, len(only), name,
                 time.time() - start)
  lines = [f"{name}:\n" + "\n".join(f"  {f}" for f in figs)
           for name, figs in figures.items()]
  print(f"qkspec demo finished; figures and tables (CSV/JSON) are in "
        f"{root.resolve()}:\n" + "\n".join(lines), flush=True)
  return figures
