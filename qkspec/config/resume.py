"""Which config fields a run resumed from its workdir may change.

A workdir's checkpoints hold the parameters, data position and sweep members
of the config that wrote them (its `config.json`). Resuming under another
model, task or vocabulary would restore into other shapes; other seeds,
batch size, sequence length or data fields would draw other batches; other
sweep fields or `locater.penalty_added_to` would train other members (the
reading of kappa is not in the saved state). So only the fields of `SAFE`,
which change how long the run goes, how often it logs, evaluates,
checkpoints and reports, how its steps are compiled, batched and placed
on the devices, or where the data lives, may differ; every other
difference (a field one config has and the other lacks included) refuses
the resume.
"""
from qkspec.config import schema

SAFE = (
    "num_steps",                                          # how long
    "log_every", "eval_every", "checkpoint_every",        # cadences
    "max_to_keep", "eval_max_batches", "progress_every_s",
    "steps_per_call", "precompile", "multihost",          # how it runs
    "sweep.member_batch", "sweep.shard_members", "model.kernels",
    "data.data_dir", "data.manual_dir",                   # where the data is
)


class _Absent:
  """The value of a field that a config lacks."""

  def __repr__(self):
    return "<absent>"


_ABSENT = _Absent()


def changed_fields(old: dict, new: dict) -> dict[str, tuple]:
  """{dotted field: (old value, new value)} of the fields not in `SAFE`
  that differ, in sorted order.

  Args:
    old, new: configs as nested dicts with JSON's types (`config.json`
      read back; `json.loads(config.to_json())`). A field only one of them
      has is "<absent>" in the other.
  """
  old, new = schema.flatten(old), schema.flatten(new)
  return {k: (old.get(k, _ABSENT), new.get(k, _ABSENT))
          for k in sorted(old.keys() | new.keys())
          if k not in SAFE and old.get(k, _ABSENT) != new.get(k, _ABSENT)}


def describe(changes: dict[str, tuple]) -> str:
  """"model.d_model 8 -> 16, data.seed 0 -> 1" for `changed_fields`."""
  return ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())
