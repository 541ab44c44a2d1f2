"""Which config fields a run resumed from its workdir may change.

Only those of `SAFE`: how long the run goes, its cadences, how its steps are
compiled, batched and placed, where the data lives. Any other change (a
field one config lacks included) would restore into other shapes, draw
other batches or train other members, and `check` refuses the resume.
"""
from qkspec.config import schema
from qkspec.config.errors import ConfigError

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
  """{dotted field: (old, new)} of the fields not in `SAFE` that differ,
  sorted, of two configs as JSON dicts (`config.json` read back); a field
  only one has is "<absent>" in the other."""
  old, new = schema.flatten(old), schema.flatten(new)
  return {k: (old.get(k, _ABSENT), new.get(k, _ABSENT))
          for k in sorted(old.keys() | new.keys())
          if k not in SAFE and old.get(k, _ABSENT) != new.get(k, _ABSENT)}


def describe(changes: dict[str, tuple]) -> str:
  """"model.d_model 8 -> 16, data.seed 0 -> 1" for `changed_fields`."""
  return ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changes.items())


def check(old: dict, new: dict, workdir: str) -> None:
  """Raises ConfigError if `workdir`'s checkpoints, trained with the config
  `old`, may not resume under `new` (both as JSON dicts)."""
  changes = changed_fields(old, new)
  if changes:
    raise ConfigError(
        f"{workdir} holds checkpoints of another config ({describe(changes)})"
        f"; use a fresh --workdir (a resumed run may change only "
        f"{', '.join(SAFE)}).")
