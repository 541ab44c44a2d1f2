"""The main job: every figure that needs no data set, on a CPU.

Runs theory_rho (Figs. 2-3, Lemma 2), entropy_bound (Fig. 4), simulate_rho
(Fig. 5) and theory_task (the Sec. 2 model with and without LocATER), each
into its own sub-directory of `workdir`.
"""
import pathlib
import time

from absl import logging

from qkspec.config import args
from qkspec.experiments import cli

EXPERIMENTS = ("theory_rho", "entropy_bound", "simulate_rho", "theory_task")


def run(workdir: str, configs_dir: str, smoke: bool = False,
        only: tuple[str, ...] = EXPERIMENTS) -> dict[str, list[str]]:
  """Runs `only` with their configs from `configs_dir`; {experiment: [its
  PNG paths]}."""
  unknown = set(only) - set(EXPERIMENTS)
  if unknown:
    raise ValueError(f"unknown experiments {sorted(unknown)}; choose from "
                     f"{EXPERIMENTS}.")
  root = pathlib.Path(workdir)
  figures = {}
  for i, name in enumerate(only, 1):
    start = time.time()
    logging.info("[%d/%d] %s ...", i, len(only), name)
    config = args.load_config_file(
        pathlib.Path(configs_dir) / f"{name}.py", "smoke" if smoke else None)
    cli.run_experiment(config, str(root / name))
    figures[name] = sorted(str(p) for p in (root / name).glob("*.png"))
    logging.info("[%d/%d] %s done in %.0f s", i, len(only), name,
                 time.time() - start)
  lines = [f"{name}:\n" + "\n".join(f"  {f}" for f in figs)
           for name, figs in figures.items()]
  print(f"qkspec demo finished; figures and tables (CSV/JSON) are in "
        f"{root.resolve()}:\n" + "\n".join(lines), flush=True)
  return figures
