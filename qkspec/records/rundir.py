"""A training workdir (or its record) read back: `members.json`, each
member's metrics and maps, and short names for what the members vary.

No plotting here: the report, the figures and the command line all read
runs through this module.
"""
import json
import os

import numpy as np

from qkspec.config import ConfigError
from qkspec.records import store
from qkspec.training import metric_writer

# what members.json varies (qkspec.config.schema.SWEEPABLE), and defaults
DEFAULTS = {"seed": 0, "kappa1": 0.0, "kappa2": 0.0, "target": 1.0,
            "penalty_added_to": "mean_loss"}
SYMBOLS = {"seed": "seed", "kappa1": r"$\kappa_1$", "kappa2": r"$\kappa_2$",
           "target": "target", "penalty_added_to": "reading"}
# the readings of kappa (qkspec.config.schema.PENALTY_ADDED_TO), short
READING_NAMES = {"mean_loss": "literal", "summed_loss": "fairseq"}


def check(workdir: str) -> None:
  """Raises ConfigError, in one line, unless `workdir` is a training run
  (a `launch/train.py` workdir, or its record): it has members.json."""
  if os.path.isfile(os.path.join(workdir, "members.json")):
    return
  if not os.path.isdir(workdir):
    problem = "no such directory"
  else:
    experiment = None
    try:
      with open(os.path.join(workdir, "config.json")) as f:
        experiment = json.load(f).get("experiment")
    except (OSError, ValueError, AttributeError):
      pass
    problem = (f"the workdir of the experiment {experiment!r} "
               "(launch/run.py), not a training run" if experiment else
               "no training run (it has no members.json)")
  raise ConfigError(f"{workdir}: {problem}; give a launch/train.py "
                    "--workdir.")


def load_members(workdir: str) -> list[dict]:
  """members.json entries, each with its `metrics` {name: (steps, values)};
  ConfigError if `workdir` is no training run."""
  check(workdir)
  with open(os.path.join(workdir, "members.json")) as f:
    members = json.load(f)
  for m in members:
    member_dir = os.path.join(workdir, m["dir"])
    m["metrics"] = {**metric_writer.read_metrics(member_dir),
                    **store.read_maps(member_dir)}
  return members


def final_value(metrics: dict, key: str) -> float:
  """The last logged value of `key` (an array's first entry); NaN if none."""
  values = metrics.get(key)
  if values is None or not len(values[0]):
    return np.nan
  return float(np.asarray(values[1][-1]).reshape(-1)[0])


def last_step(member) -> int:
  """The member's last step: train/loss's, else any metric's; 0 if none."""
  metrics = member["metrics"]
  loss = metrics.get("train/loss")
  if loss is not None and len(loss[0]):
    return int(loss[0][-1])
  return max((int(s[-1]) for s, _ in metrics.values() if len(s)), default=0)


def varying_fields(members) -> list[str]:
  """The `DEFAULTS` fields whose values differ between members, in order."""
  return [f for f in DEFAULTS
          if len({m.get(f, DEFAULTS[f]) for m in members}) > 1]




def member_names(members) -> list[str]:
  """Short labels naming only what varies ("1: $\\kappa_2$=0.1", ...)."""
  fields = varying_fields(members) or ["kappa1", "kappa2"]
  names = []
  for i, m in enumerate(members, 1):
    values = [m.get(f, DEFAULTS[f]) for f in fields]
    names.append(f"{i}: " + ", ".join(
        f"{SYMBOLS[f]}=" + (READING_NAMES.get(v, v) if isinstance(v, str)
                            else f"{v:g}") for f, v in zip(fields, values)))
  return names


def rho_keys(layer: int = 0) -> tuple[str, str]:
  """Names of layer `layer`'s rho_i to try: one head's, else head 0's."""
  return f"l{layer}/rho", f"l{layer}/h0/rho"
