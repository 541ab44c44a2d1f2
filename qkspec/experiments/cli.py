"""The absl command line of `launch/`: --config and --workdir, two entry points.

* `launch/run.py` runs any experiment: the config names it
  (`config.experiment`, e.g. "simulate_rho" runs
  `qkspec.experiments.simulate_rho.run`), as big_vision's configs name their
  trainer. Config file, experiment module and experiment id share one name.
* `launch/train.py` trains a training config (`config.task`: theory or lm),
  one run or a vmapped sweep, with `qkspec.training.loop`.

`run.py` given a training config trains it and then draws its figures
(`training_plots`), so either command works for it. The old per-figure scripts (`launch/simulate.py`, ...) remain
as aliases of `run.py` that say so.
"""
import importlib
import pkgutil
from typing import Any, Callable

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

# Modules of qkspec.experiments that are not experiments (helpers).
_NOT_EXPERIMENTS = ("chunked", "cli", "demo", "inputs", "measures", "outputs",
                    "training_plots")


def experiments() -> tuple[str, ...]:
  """The experiment ids: modules of `qkspec.experiments` with a `run`."""
  package = importlib.import_module("qkspec.experiments")
  names = []
  for info in pkgutil.iter_modules(package.__path__):
    if info.name.startswith("_") or info.name in _NOT_EXPERIMENTS:
      continue
    if hasattr(importlib.import_module(f"qkspec.experiments.{info.name}"),
               "run"):
      names.append(info.name)
  return tuple(sorted(names))


def run_experiment(config, workdir: str, default: str | None = None) -> Any:
  """Runs `config.experiment`'s `run(config, workdir)`, or trains `config`.

  `default` is the experiment of a config that has neither an `experiment`
  nor a `task` field (the old per-figure launch scripts pass theirs).

  Raises:
    ValueError: the config names no experiment and is no training config,
      or names an unknown experiment.
  """
  name = config.get("experiment", None)
  if name is None and "task" in config:       # a training config
    return train_and_plot(config, workdir)
  name = name or default
  if name is None:
    raise ValueError("the config names no experiment: set config.experiment "
                     f"to one of {experiments()} (or pass a training config, "
                     "which has config.task).")
  known = experiments()
  if name not in known:
    raise ValueError(f"config.experiment must be one of {known}, got "
                     f"{name!r}.")
  return importlib.import_module(f"qkspec.experiments.{name}").run(config,
                                                                   workdir)


def train_and_plot(config, workdir: str) -> Any:
  """Trains a training config (`config.task`), then draws its figures."""
  # pylint: disable=g-import-not-at-top
  from qkspec.experiments import training_plots
  from qkspec.training import loop
  # pylint: enable=g-import-not-at-top
  logging.info("a training config (task=%s): training it", config.task)
  state = loop.train_and_evaluate(config, workdir)
  training_plots.plot_workdir(workdir)
  return state


def main(run: Callable[..., Any], what: str = "config",
         alias_of: str | None = None) -> None:
  """Defines --config and --workdir, then calls `run(config, workdir)`.

  Args:
    run: the library call, given the resolved ConfigDict (after `:arg` and
      `--config.x=y` overrides) and the workdir.
    what: the kind of config, for --help.
    alias_of: for an old script kept as an alias: the command that replaced
      it (printed as a warning).
  """
  config = config_flags.DEFINE_config_file(
      "config", None, f"Path to a {what} file (append :smoke for a tiny "
      "run).", lock_config=True)
  workdir = flags.DEFINE_string(
      "workdir", None, "Directory for figures, tables, metrics, checkpoints "
      "and config.json.")
  flags.mark_flags_as_required(["config", "workdir"])

  def _main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if alias_of:
      logging.warning("%s is an old name of %s (same flags); use that.",
                      argv[0], alias_of)
    logging.info("config:\n%s", config.value)
    run(config.value, workdir.value)

  app.run(_main)
