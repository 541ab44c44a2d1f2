"""What a run trains and where, worked out once from its config.

`make_plan(config)` gives the `Plan` that the loop hands to
`step.build_steps`: the members of a sweep (`sweep.members`) and their
names, whether their states stack on a member axis, where they sit on the
devices (`sweep.Layout`) and the mesh of that layout.
"""
import dataclasses
from typing import Sequence

import jax
import ml_collections

from qkspec.config import schema
from qkspec.training import sweep


@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Plan:
  """A run's members and their places (`make_plan`)."""
  config: ml_collections.ConfigDict
  members: tuple[dict, ...]   # {seed, kappa1, kappa2, target,
                              #  penalty_added_to} per member (one if no sweep)
  names: tuple[str, ...]      # "run", or the swept values ("kappa2=0.1")
  vmapped: bool               # a sweep: states on a leading member axis
  layout: sweep.Layout        # the members on the devices
  mesh: jax.sharding.Mesh     # ("data",), or ("members", "data") if sharded


def make_mesh(layout: sweep.Layout,
              devices: Sequence[jax.Device] | None = None
              ) -> jax.sharding.Mesh:
  """The mesh of `devices` (default all), with automatic (GSPMD)
  sharding: ("data",), or ("members", "data") where `layout` shards the
  members."""
  if layout.groups == 1:
    return jax.make_mesh((layout.data,), ("data",),
                         axis_types=(jax.sharding.AxisType.Auto,),
                         devices=devices)
  return jax.make_mesh((layout.groups, layout.data), ("members", "data"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2,
                       devices=devices)


def make_plan(config, devices: Sequence[jax.Device] | None = None) -> Plan:
  """The plan of a validated `config` on `devices` (default: all of them,
  over every process). Raises ConfigError if the batch does not split over
  the devices of a member group."""
  devices = jax.devices() if devices is None else list(devices)
  members = tuple(sweep.members(config))
  swept = sweep.swept_keys(config)
  shard = sweep.shards_members(config, len(devices), jax.process_count())
  layout = sweep.layout(len(members) if swept else 1, len(devices), shard)
  schema.check_batch_split(config, layout.data)
  return Plan(config=config, members=members,
              names=tuple(sweep.member_name(m, swept) for m in members),
              vmapped=bool(swept), layout=layout,
              mesh=make_mesh(layout, devices))
