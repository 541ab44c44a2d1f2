"""Orbax checkpoints of the train state (the only module importing orbax).

A checkpoint at step s holds `state` (the TrainState pytree: step, params,
optimizer state, LocATER hyperparameters; with a leading member axis for a
vmapped sweep) and `meta` (JSON: the step and the data position, which is
the step because every batch is a pure function of (data seed, step)).
"""
import logging
import os
from typing import Any

from absl import logging as absl_logging
import jax
import orbax.checkpoint as ocp


class _QuietOrbax(logging.Filter):
  """Drops orbax's per-save INFO chatter (dozens of lines per checkpoint)."""

  def filter(self, record: logging.LogRecord) -> bool:
    return (record.levelno >= logging.WARNING
            or f"{os.sep}orbax{os.sep}" not in record.pathname)


absl_logging.get_absl_logger().addFilter(_QuietOrbax())


class Checkpointer:
  """`ocp.CheckpointManager` over `<workdir>/ckpt`.

  Args:
    workdir: the run's directory.
    max_to_keep: checkpoints kept (the newest).
    save_interval_steps: `save` is a no-op at other steps unless forced.
  """

  def __init__(self, workdir: str, *, max_to_keep: int = 3,
               save_interval_steps: int = 1):
    self.directory = os.path.join(os.path.abspath(workdir), "ckpt")
    self._manager = ocp.CheckpointManager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, save_interval_steps=save_interval_steps,
            create=True, cleanup_tmp_directories=True))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def save(self, step: int, state: Any, *, force: bool = False) -> bool:
    """Saves (asynchronously) if `step` is a save step or `force`."""
    if step in self._manager.all_steps():
      return False
    return self._manager.save(
        step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            meta=ocp.args.JsonSave({"step": int(step),
                                    "data_position": int(step)})),
        force=force)

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """(state, meta) at `step`; `abstract_state` gives shapes and shardings."""
    out = self._manager.restore(
        step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state),
            meta=ocp.args.JsonRestore()))
    return out["state"], dict(out["meta"])

  def wait_until_finished(self):
    self._manager.wait_until_finished()

  def close(self):
    self._manager.wait_until_finished()
    self._manager.close()


def abstract_like(tree: Any, sharding) -> Any:
  """ShapeDtypeStructs of `tree` (e.g. from `jax.eval_shape`) on `sharding`."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
      tree)
