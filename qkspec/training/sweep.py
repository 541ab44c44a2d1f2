"""Vmapped sweeps: members differing in seed, LocATER strengths or reading.

`config.sweep` lists values for the fields of `schema.SWEEPABLE` (an empty
tuple: not swept); `mode="zip"` pairs them entry by entry (length-1 entries
broadcast), `mode="product"` takes all combinations. The members share the
model, optimizer and data; their states are stacked on a leading axis and
one compiled step trains them all (strengths in `TrainState.hparams`,
seeds in the stacked keys, a swept reading as a per-member penalty
factor). A member equals the same config trained alone (`member_config`)
up to float reassociation (tests/training/sweep_test.py).

With members sharded (`layout`), each group of devices trains its own
members on the whole batch, N padded with copies of the last member; the
compiled functions take and return the N real members' keys, metrics and
measurements, and checkpoints hold only those, so a run resumes on
another device count.

`make_plan(config)` works all of this out once: the `Plan` that the loop
hands to `step.build_steps` holds the members and their names, whether
their states stack on a member axis, their `Layout` on the devices and the
mesh of that layout.
"""
import dataclasses
import functools
import itertools
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.config import ConfigError
from qkspec.config import schema
from qkspec.theory import locater


def swept_keys(config) -> list[str]:
  sweep = config.get("sweep", None) or {}
  return [k for k in schema.SWEEPABLE if sweep.get(k)]


def members(config) -> list[dict]:
  """[{seed, kappa1, kappa2, target, penalty_added_to}] per member (one if
  no sweep)."""
  base = {"seed": int(config.seed),
          **{k: float(config.locater[k])
             for k in locater.LocaterHParams._fields},
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
  # each swept value of the type of the base one: int, float or str
  return [{**base, **{k: type(base[k])(c) for k, c in zip(keys, combo)}}
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
  c.locater.update({k: member[k] for k in (*locater.LocaterHParams._fields,
                                          "penalty_added_to")})
  c.sweep.update({k: () for k in schema.SWEEPABLE if k in c.sweep})
  return c


def hparams(member: dict) -> locater.LocaterHParams:
  """The LocATER strengths of one member as float32 scalars."""
  return locater.LocaterHParams(
      **{k: jnp.float32(member[k]) for k in locater.LocaterHParams._fields})


def stack(trees: list):
  """Per-member pytrees stacked on a new leading member axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def over_members(fn, in_axes: tuple, member_batch: int = 0, mesh=None):
  """`fn` over the leading member axis of the args whose `in_axes` is 0:
  `jax.vmap` if `member_batch` is 0, else `jax.lax.map`, `member_batch` at
  a time (1: no batch axis, the single run's code). On a `mesh` with a
  "members" axis each device group maps its own members (`on_groups`)."""
  if not member_batch:
    return on_groups(jax.vmap(fn, in_axes=in_axes), in_axes, mesh)

  def mapped(*args):
    swept = tuple(a for a, ax in zip(args, in_axes) if ax == 0)

    def one(xs):
      it = iter(xs)
      return fn(*(next(it) if ax == 0 else a for a, ax in zip(args, in_axes)))
    return jax.lax.map(one, swept,
                       batch_size=member_batch if member_batch > 1 else None)
  return on_groups(mapped, in_axes, mesh)


# ------------------------------------------------ members on the devices ----

class Layout(NamedTuple):
  """N members on D = groups x data devices (`layout`)."""
  members: int     # N, the real members (1: a single run)
  groups: int      # m, the mesh's "members" axis (1: members replicated)
  data: int        # devices per group, the "data" axis

  @property
  def per_group(self) -> int:
    """Members each group trains: ceil(N / m)."""
    return -(-self.members // self.groups)

  @property
  def padded(self) -> int:
    """N padded to a multiple of m with copies of the last member."""
    return self.per_group * self.groups


def layout(members: int, devices: int, shard: bool = True) -> Layout:
  """Where `members` members train on `devices` devices: with `shard`,
  m = the smallest divisor of `devices` that is >= `members` (else all);
  without, or for one member, m = 1."""
  if not shard or members <= 1:
    return Layout(members, 1, devices)
  groups = min((g for g in range(members, devices + 1) if devices % g == 0),
               default=devices)
  return Layout(members, groups, devices // groups)


def shards_members(config, devices: int, processes: int = 1) -> bool:
  """`config.sweep.shard_members` (None: on with several devices of one
  process). Raises ConfigError if True with several processes: each host
  builds only its rows of a batch (`qkspec.data.pipeline.host_rows`)."""
  shard = config.get("sweep", {}).get("shard_members", None)
  if shard is None:
    return devices > 1 and processes == 1
  if shard and processes > 1:
    raise ConfigError("config.sweep.shard_members=True needs one process "
                      f"(got {processes}); set it to False or leave it auto.")
  return bool(shard)


def pad(tree, lay: Layout):
  """Member-stacked `tree` [N, ...] -> [padded, ...]: the last member
  repeated (inside a compiled function; `tree` itself if nothing pads)."""
  if lay.padded == lay.members:
    return tree
  index = np.minimum(np.arange(lay.padded), lay.members - 1)
  return jax.tree.map(lambda x: x[index], tree)


def real(tree, lay: Layout):
  """The real members [N, ...] of a padded `tree` [padded, ...]."""
  if lay.padded == lay.members:
    return tree
  return jax.tree.map(lambda x: x[:lay.members], tree)


def on_groups(fn, in_axes: tuple, mesh: jax.sharding.Mesh | None):
  """`fn` (over members) run by each device group on its own members:
  `jax.shard_map` manual over "members" only ("data" automatic within),
  `check_vma` off, as no member's computation leaves its group and the
  check would flag the model's scans from a constant carry."""
  if mesh is None or "members" not in mesh.axis_names:
    return fn
  spec = jax.P("members")
  return jax.shard_map(
      fn, mesh=mesh, axis_names={"members"}, out_specs=spec,
      in_specs=tuple(spec if ax == 0 else jax.P() for ax in in_axes),
      check_vma=False)


def padded_init(init, lay: Layout):
  """`init(keys, hparams)` of the N real members' -> the padded state."""
  return lambda keys, hparams: init(pad(keys, lay), pad(hparams, lay))


def member_step(step, scales: list[float], member_batch: int, mesh,
                lay: Layout):
  """`step(state, batch, key, *, penalty_scale)` over the members:
  `(state [padded], batch, keys [N]) -> (state [padded], metrics [N])`;
  distinct `scales` (one per member) are mapped with the state."""
  if len(set(scales)) > 1:
    def one(state, batch, key, scale):
      return step(state, batch, key, penalty_scale=scale)
    in_axes = (0, None, 0, 0)
    extra = (pad(np.asarray(scales, np.float32), lay),)
  else:
    one = functools.partial(step, penalty_scale=scales[0])
    in_axes, extra = (0, None, 0), ()
  mapped = over_members(one, in_axes, member_batch, mesh)

  def members_step(state, batch, keys):
    state, metrics = mapped(state, batch, pad(keys, lay), *extra)
    return state, real(metrics, lay)
  return members_step


def real_outputs(fn, member_batch: int, mesh, lay: Layout):
  """`fn(params, batch)` over the members: the real members' outputs."""
  mapped = over_members(fn, (0, None), member_batch, mesh)

  def real_members(params, batch):
    return real(mapped(params, batch), lay)
  return real_members


def saving(lay: Layout, copy, state_sharding, replicated) -> dict:
  """The saved, saved_sharding, unsaved and real fields of `step.Steps`:
  without padding `copy` (a jitted copy of the state) and the identity;
  with it, the N real members replicated and the jitted padding back."""
  if lay.padded == lay.members:
    same = lambda state: state  # noqa: E731
    return dict(saved=copy, saved_sharding=state_sharding, unsaved=same,
                real=same)
  saved = jax.jit(lambda s: real(s, lay), out_shardings=replicated)
  return dict(saved=saved, saved_sharding=replicated, real=saved,
              unsaved=jax.jit(lambda s: pad(s, lay),
                              out_shardings=state_sharding))


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
  """A run's members and their places (`make_plan`)."""
  config: ml_collections.ConfigDict
  members: tuple[dict, ...]   # {seed, kappa1, kappa2, target,
                              #  penalty_added_to} per member (one if no sweep)
  names: tuple[str, ...]      # "run", or the swept values ("kappa2=0.1")
  vmapped: bool               # a sweep: states on a leading member axis
  layout: Layout              # the members on the devices
  mesh: jax.sharding.Mesh     # ("data",), or ("members", "data") if sharded


def make_mesh(lay: Layout, devices: Sequence[jax.Device] | None = None
              ) -> jax.sharding.Mesh:
  """The mesh of `devices` (default all), with automatic (GSPMD)
  sharding: ("data",), or ("members", "data") where `lay` shards the
  members."""
  if lay.groups == 1:
    return jax.make_mesh((lay.data,), ("data",),
                         axis_types=(jax.sharding.AxisType.Auto,),
                         devices=devices)
  return jax.make_mesh((lay.groups, lay.data), ("members", "data"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2,
                       devices=devices)


def make_plan(config, devices: Sequence[jax.Device] | None = None) -> Plan:
  """The plan of a validated `config` on `devices` (default: all of them,
  over every process). Raises ConfigError if the batch does not split over
  the devices of a member group."""
  devices = jax.devices() if devices is None else list(devices)
  ms = tuple(members(config))
  swept = swept_keys(config)
  shard = shards_members(config, len(devices), jax.process_count())
  lay = layout(len(ms), len(devices), shard)     # 1 member if not swept
  schema.check_batch_split(config, lay.data)
  return Plan(config=config, members=ms,
              names=tuple(member_name(m, swept) for m in ms),
              vmapped=bool(swept), layout=lay, mesh=make_mesh(lay, devices))
