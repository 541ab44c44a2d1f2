"""Orbax checkpoints of the train state (the only module importing orbax).

A checkpoint at step s holds `state` (the TrainState, with a leading member
axis for a sweep) and `meta` (JSON: the step and the data position, which is
the step, as batches are pure functions of (data seed, step)). A damaged
checkpoint is named in one warning line (nothing else of it reaches the
terminal: `qkspec.runtime.logs`) and moved to `<workdir>/ckpt_damaged/`.
"""
import os
import shutil
from typing import Any

from absl import logging as absl_logging
import jax
import orbax.checkpoint as ocp

from qkspec.config import usage
from qkspec.runtime import logs

logs.install()


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
    with logs.orbax_silenced():     # it reads each checkpoint's metadata
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
    newer ones are moved to `ckpt_damaged/` (so a later save at their step
    is not skipped), each named in one warning line; RuntimeError if none
    restores."""
    failed = []
    for step in sorted(self.all_steps(), reverse=True):
      try:
        with logs.orbax_silenced():
          state, _ = self.restore(step, abstract_state)
      except Exception as e:  # pylint: disable=broad-except
        logs.quiet_abandoned_reads()
        # orbax wraps tensorstore's error: the innermost one says what failed
        failed.append((step, first_line(usage.root(e))))
        continue
      self._set_aside(failed, step)
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

  def completed_step(self) -> int | None:
    """The newest checkpoint on disk that was completed, read from the
    directory (orbax writes into a temporary folder and renames it to the
    step when every process has written its part); None if none."""
    try:
      names = os.listdir(self.directory)
    except FileNotFoundError:
      return None
    return max((int(n) for n in names if n.isdigit()), default=None)

  def _set_aside(self, failed: list[tuple[int, str]], restored: int) -> None:
    """Moves the `failed` (step, reason) checkpoints to `damaged_directory`
    (process 0), one warning line each."""
    if not failed:
      return
    for step, reason in failed:
      absl_logging.warning(
          "checkpoint %s cannot be restored (%s): moved to %s, resuming from "
          "step %d", self.step_dir(step), reason, self.damaged_directory,
          restored)
      if jax.process_index() == 0 and os.path.exists(self.step_dir(step)):
        dest = os.path.join(self.damaged_directory, str(step))
        while os.path.exists(dest):
          dest += "_"
        os.makedirs(self.damaged_directory, exist_ok=True)
        shutil.move(self.step_dir(step), dest)
    if jax.process_count() > 1:
      # pylint: disable-next=g-import-not-at-top
      from jax.experimental import multihost_utils
      multihost_utils.sync_global_devices("qkspec_ckpt_set_aside")
    with logs.orbax_silenced():
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
