"""What `launch/run.py` runs: the experiment a config names, or a training
config trained and drawn.

`run(config, workdir)` calls `qkspec.experiments.<config.experiment>.run`,
or, for a training config (it has `config.task`), trains it and draws its
figures; `check(config)` is the part of that which needs no jax.
"""
import importlib
from typing import Any

from qkspec.config import ConfigError
from qkspec.config import schema
from qkspec.experiments import EXPERIMENTS


def check(config) -> None:
  """Raises ConfigError unless `run` can start on `config`: an experiment
  it knows, or a training config that `schema.validate` accepts."""
  name = config.get("experiment", None)
  if name is None and "task" in config:
    schema.validate(config)
  elif name is None:
    raise ConfigError("the config names no experiment: set config.experiment "
                      f"to one of {EXPERIMENTS} (or pass a training config, "
                      "which has config.task).")
  elif name not in EXPERIMENTS:
    raise ConfigError(f"config.experiment must be one of {EXPERIMENTS}, got "
                      f"{name!r}.")


def run(config, workdir: str) -> Any:
  """Runs `config.experiment`'s `run(config, workdir)`, or trains `config`
  (which the loop validates)."""
  if "task" in config and config.get("experiment", None) is None:
    return train_and_plot(config, workdir)
  check(config)
  module = importlib.import_module(f"qkspec.experiments.{config.experiment}")
  return module.run(config, workdir)


def train_and_plot(config, workdir: str) -> Any:
  """Trains a training config (`config.task`); process 0 draws the figures."""
  # pylint: disable=g-import-not-at-top
  import jax
  from qkspec.plots import training_figures
  from qkspec.training import loop
  # pylint: enable=g-import-not-at-top
  state = loop.train_and_evaluate(config, workdir)
  if jax.process_index() == 0:
    training_figures.plot_workdir(workdir)
  return state
