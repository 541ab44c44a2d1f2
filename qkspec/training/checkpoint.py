"""Orbax checkpoints of the train state (the only module importing orbax).

A checkpoint at step s holds `state` (the TrainState, with a leading member
axis for a sweep) and `meta` (JSON: the step and the data position, which is
the step, as batches are pure functions of (data seed, step)). A damaged
checkpoint is named in a warning and moved to `<workdir>/ckpt_damaged/`.
"""
import contextlib
import logging
import os
import shutil
import sys
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


@contextlib.contextmanager
def _quiet_closed_event_loop():
  """Drops the "Event loop is closed" errors of a failed restore (orbax
  closes its loop while tensorstore completes the other reads)."""
  previous = sys.unraisablehook

  def hook(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError)
            and "Event loop is closed" in str(unraisable.exc_value)):
      previous(unraisable)

  sys.unraisablehook = hook
  try:
    yield
  finally:
    sys.unraisablehook = previous


class _Manager(ocp.CheckpointManager):
  """`ocp.CheckpointManager` that leaves JAX's preemption sync point to the
  loop: its call counter must grow by one per call, and the loop asks it
  once per compiled call (`qkspec.training.preemption`)."""

  def reached_preemption(self, step: int) -> bool:
    del step
    return False


class Checkpointer:
  """`ocp.CheckpointManager` over `<workdir>/ckpt`, keeping the newest
  `max_to_keep` checkpoints."""

  def __init__(self, workdir: str, *, max_to_keep: int = 3):
    self.directory = os.path.join(os.path.abspath(workdir), "ckpt")
    self.damaged_directory = self.directory + "_damaged"
    self._manager = _Manager(
        self.directory,
        options=ocp.CheckpointManagerOptions(
            max_to_keep=max_to_keep, create=True,
            cleanup_tmp_directories=True))

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self._manager.all_steps())

  def save(self, step: int, state: Any) -> bool:
    """Saves `state` at `step` (asynchronously) unless it has a checkpoint;
    whether it saved."""
    if step in self._manager.all_steps():
      return False
    return self._manager.save(
        step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            meta=ocp.args.JsonSave({"step": int(step),
                                    "data_position": int(step)})),
        force=True)

  def restore(self, step: int, abstract_state: Any) -> tuple[Any, dict]:
    """(state, meta) at `step`; `abstract_state` gives shapes and shardings."""
    out = self._manager.restore(
        step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(abstract_state),
            meta=ocp.args.JsonRestore()))
    return out["state"], dict(out["meta"])

  def restore_newest(self, abstract_state: Any) -> tuple[int, Any] | None:
    """(step, state) of the newest checkpoint that restores, or None;
    newer ones are named and moved to `ckpt_damaged/` (so a later save at
    their step is not skipped); RuntimeError if none restores."""
    failed = []
    for step in sorted(self.all_steps(), reverse=True):
      try:
        with _quiet_closed_event_loop():
          state, _ = self.restore(step, abstract_state)
      except Exception as e:  # pylint: disable=broad-except
        reason = first_line(e)
        absl_logging.warning(
            "checkpoint %s cannot be restored (%s); trying the one before.",
            self.step_dir(step), reason)
        failed.append((step, reason))
        continue
      self._set_aside([s for s, _ in failed])
      return step, state
    if failed:
      raise RuntimeError(
          f"none of the checkpoints in {self.directory} restores ("
          + "; ".join(f"step {s}: {r}" for s, r in failed) + "). Move that "
          "folder away (e.g. `mv ckpt ckpt.bad` in the workdir) to start "
          "afresh, or use a fresh --workdir; if the config changed since "
          "they were written, use a fresh --workdir.")
    return None

  def step_dir(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def _set_aside(self, steps: list[int]) -> None:
    """Moves checkpoints `steps` to `damaged_directory` (process 0)."""
    if not steps:
      return
    if jax.process_index() == 0:
      os.makedirs(self.damaged_directory, exist_ok=True)
      for step in steps:
        dest = os.path.join(self.damaged_directory, str(step))
        while os.path.exists(dest):
          dest += "_"
        if os.path.exists(self.step_dir(step)):
          shutil.move(self.step_dir(step), dest)
          absl_logging.warning("moved checkpoint %d to %s", step, dest)
    if jax.process_count() > 1:
      # pylint: disable-next=g-import-not-at-top
      from jax.experimental import multihost_utils
      multihost_utils.sync_global_devices("qkspec_ckpt_set_aside")
    self._manager.reload()

  def describe(self) -> str:
    """"the newest checkpoint is step s (<dir>)", or that there is none."""
    step = self.latest_step()
    if step is None:
      return f"no checkpoint was written yet (in {self.directory})"
    return f"the newest checkpoint is step {step} ({self.step_dir(step)})"

  def wait_until_finished(self):
    self._manager.wait_until_finished()

  def close(self):
    self._manager.close()


def first_line(e: BaseException, limit: int = 200) -> str:
  """"Type: first line of the message", at most `limit` characters."""
  text = e.args[0] if isinstance(e, KeyError) and e.args else e  # no repr
  lines = str(text).strip().splitlines()
  text = f"{type(e).__name__}: {lines[0] if lines else ''}"
  return text if len(text) <= limit else text[:limit - 3] + "..."


def abstract_like(tree: Any, sharding) -> Any:
  """ShapeDtypeStructs of `tree` (e.g. from `jax.eval_shape`) on `sharding`."""
  return jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
      tree)
