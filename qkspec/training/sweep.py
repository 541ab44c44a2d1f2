"""Vmapped sweeps: members differing in seed, LocATER strengths or reading.

`config.sweep` lists values for any of `seed`, the fields of
`qkspec.theory.locater.LocaterHParams` (`kappa1`, `kappa2`, `target`) and
`penalty_added_to`, the reading of kappa (`qkspec.config.schema.SWEEPABLE`;
an empty tuple means not swept);
`mode="zip"` pairs them entry by entry (length-1 entries broadcast),
`mode="product"` takes all combinations.
All members share the model, optimizer and data; in `qkspec.training.loop`
their states are stacked on a leading member axis and one `jax.vmap`-ed,
jit-compiled step (`qkspec.training.step`) trains them side by side. The
swept strengths live in `TrainState.hparams` (a `LocaterHParams` of arrays,
not closure constants) and the seeds in the stacked PRNG keys, so one
compiled step serves every member. A swept reading becomes a per-member
factor on the penalty (`qkspec.training.step.penalty_scales`), so both
readings train side by side on the same batches.
`config.sweep.member_batch` chooses how that step runs them: all at once
(0, `jax.vmap`), or k at a time in a loop inside the compiled step (k >= 1,
`jax.lax.map`); -1 picks 1 on a CPU and 0 elsewhere (`over_members`).

A member equals the same config trained alone (`member_config`), up to
float reassociation in the batched matmuls (tests/sweep_test.py).
"""
import itertools

import jax
import jax.numpy as jnp
import ml_collections

from qkspec.config import schema
from qkspec.theory import locater

# kappa1, kappa2, target; the config's copy (schema.LOCATER_FIELDS, which
# loads without jax) must match: tests/sweep_test.py checks it.
HPARAMS = locater.LocaterHParams._fields


def swept_keys(config) -> list[str]:
  sweep = config.get("sweep", None) or {}
  return [k for k in schema.SWEEPABLE if sweep.get(k)]


def is_sweep(config) -> bool:
  return bool(swept_keys(config))


def _cast(key: str, value):
  if key == "penalty_added_to":
    return str(value)
  return int(value) if key == "seed" else float(value)


def members(config) -> list[dict]:
  """[{seed, kappa1, kappa2, target, penalty_added_to}] per member (one if
  no sweep)."""
  base = {"seed": int(config.seed),
          **{k: float(config.locater[k]) for k in HPARAMS},
          "penalty_added_to": str(config.locater.get("penalty_added_to",
                                                     "mean_loss"))}
  keys = swept_keys(config)
  if not keys:
    return [base]
  values = {k: tuple(config.sweep[k]) for k in keys}
  if config.sweep.get("mode", "zip") == "product":
    combos = list(itertools.product(*values.values()))
  else:
    n = max(len(v) for v in values.values())
    combos = [tuple(v[i] if len(v) > 1 else v[0] for v in values.values())
              for i in range(n)]
  return [{**base, **{k: _cast(k, c) for k, c in zip(keys, combo)}}
          for combo in combos]


def member_name(member: dict, keys: list[str]) -> str:
  """E.g. "kappa1=100,kappa2=0.001" (only the swept keys)."""
  return ",".join(f"{k}={_text(member[k])}" for k in keys) or "run"


def _text(value) -> str:
  return value if isinstance(value, str) else f"{value:g}"


def member_config(config, member: dict) -> ml_collections.ConfigDict:
  """`config` with one member's values and no sweep (to train it alone)."""
  c = ml_collections.ConfigDict(config.to_dict())
  c.seed = member["seed"]
  for k in HPARAMS:
    c.locater[k] = member[k]
  c.locater.penalty_added_to = member["penalty_added_to"]
  for k in schema.SWEEPABLE:
    if k in c.sweep:
      c.sweep[k] = ()
  return c


def hparams(member: dict) -> locater.LocaterHParams:
  """The LocATER strengths of one member as float32 scalars."""
  return locater.LocaterHParams(
      **{k: jnp.float32(member[k]) for k in HPARAMS})


def stack(trees: list):
  """Per-member pytrees stacked on a new leading member axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def stacked_hparams(ms: list[dict]) -> locater.LocaterHParams:
  """`hparams` of every member, [N] arrays."""
  return stack([hparams(m) for m in ms])


def over_members(fn, in_axes: tuple, member_batch: int = 0):
  """`fn` over the leading member axis of the args whose `in_axes` is 0.

  `member_batch` = 0 is `jax.vmap(fn, in_axes)`: all members in one batched
  computation. Otherwise `jax.lax.map`: members run one after another inside
  the same compiled program, `member_batch` at a time (vmapped within a
  group; 1 = no batch axis at all, the single run's code). Same results;
  on a CPU the batched [M, C, V] logits blocks fall out of cache and
  member_batch = 1 is the fastest.
  """
  if not member_batch:
    return jax.vmap(fn, in_axes=in_axes)

  def mapped(*args):
    swept = tuple(a for a, ax in zip(args, in_axes) if ax == 0)

    def one(xs):
      it = iter(xs)
      return fn(*(next(it) if ax == 0 else a for a, ax in zip(args, in_axes)))
    return jax.lax.map(one, swept,
                       batch_size=member_batch if member_batch > 1 else None)
  return mapped
