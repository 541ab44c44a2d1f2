"""The periodic actions of the training loop: log, evaluate, checkpoint.

Each runs before the update of a step where it is `due` (every `every`
steps after the start, and at the last step); `run` is the loop's `Run`.
"""
# pylint: disable=invalid-name
import time

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.training import checkpoint as ckpt_lib
from qkspec.training import layer_stats
from qkspec.training import progress
from qkspec.training import step as step_lib


class Pending:
  """Train metrics of the steps since the last log, still on the device:
  one step's, or k steps' stacked on a leading axis (`count=k`)."""

  def __init__(self, names: list[str], describe_ckpt):
    self._names, self._describe_ckpt = names, describe_ckpt
    self.items: list[tuple[int, dict, int | None]] = []

  def add(self, step: int, metrics: dict, count: int | None = None) -> None:
    """Metrics of `step` (or of steps step .. step+count-1, stacked)."""
    self.items.append((step, metrics, count))

  def take(self) -> list[tuple[int, dict, int | None]]:
    items, self.items = self.items, []
    return items

  @staticmethod
  def per_step(items, key: str) -> tuple[list[int], np.ndarray]:
    """(steps, values[steps, ...]) of metric `key` over `items` (fetched)."""
    got = jax.device_get([m[key] for _, m, _ in items])
    steps, values = [], []
    for (step, _, count), v in zip(items, got):
      v = np.asarray(v)
      steps += [step] if count is None else list(range(step, step + count))
      values.append(v[None] if count is None else v)
    return steps, np.concatenate(values)

  def check_finite(self) -> None:
    """Raises FloatingPointError naming the first step with NaN/Inf."""
    if not self.items:
      return
    steps, finite = self.per_step(self.items, "finite")
    if finite.all():
      return
    idx = np.argwhere(~finite)[0]
    step = steps[idx[0]]
    who = f" (sweep member {self._names[idx[1]]})" if finite.ndim > 1 else ""
    raise FloatingPointError(
        f"NaN/Inf in the loss or gradients at step {step}{who}: the update "
        f"from state.step={step} was not finite. Nothing past it was saved: "
        f"{self._describe_ckpt()}.")


class PeriodicAction:
  """Runs every `every` steps after the start step, and at the last step.
  `phase`: what its wall time counts as (`progress.PhaseClock`)."""

  phase = "log"

  def __init__(self, every: int, run, start: int):
    self.every, self.run, self.start = every, run, start
    self.num_steps = run.plan.config.num_steps

  def due(self, step: int) -> bool:
    return step > self.start and (step % self.every == 0
                                  or step == self.num_steps)

  def next_due(self, step: int) -> int:
    """The first step after `step` at which this action is due."""
    return min((step // self.every + 1) * self.every, self.num_steps)

  def begin(self, step: int, state):
    """Runs the action at `step`; returns what is left of it (a callable
    that needs no more of `state`, which the loop runs once it has
    dispatched the next call), or None."""
    raise NotImplementedError


class LogAction(PeriodicAction):
  """Mean train metrics since the last log, measurements, steps/s: `begin`
  checks for NaN/Inf and dispatches the measurements, and leaves fetching
  and writing them for while the next call computes."""

  def __init__(self, run, start: int, fresh: bool, pending: Pending,
               writers):
    super().__init__(run.plan.config.log_every, run, start)
    self.fresh, self.pending, self.writers = fresh, pending, writers
    self._since = (time.time(), start)

  def due(self, step: int) -> bool:
    # Also at the start of a fresh run (not at a restored step: its record
    # was written before its checkpoint).
    return (step > self.start or self.fresh) and (
        step % self.every == 0 or step == self.num_steps)

  def begin(self, step: int, state):
    self.pending.check_finite()
    items = self.pending.take()
    now = time.time()
    t_last, s_last = self._since
    rate = (step - s_last) / max(now - t_last, 1e-9)
    self._since = (now, step)
    steps = self.run.steps
    meas = steps.measure(state.params, steps.task.train_batch(step))
    return lambda: self._write(step, items, rate, meas)

  def _write(self, step: int, items, rate: float, meas) -> None:
    """Fetches the train metrics of `items` and the measurements `meas`
    and writes them (and a line) for `step`."""
    train = {} if not items else {
        f"train/{k}": np.mean(Pending.per_step(items, k)[1], axis=0)
        for k in ("loss", "penalty", "grad_norm")}
    meas = jax.device_get(meas)
    for i, w in enumerate(self.writers):
      scalars, arrays = layer_stats.flatten(self.run.member_view(meas, i))
      if items:
        scalars.update({k: self.run.member_view(v, i)
                        for k, v in train.items()})
        if self.run.steps.task.kind == "lm":
          scalars["train/ppl"] = np.exp(scalars["train/loss"])
        scalars["steps_per_sec"] = rate
      w.write_scalars(step, scalars)
      w.write_arrays(step, arrays)
    if items:
      logging.info("step %d/%d  train/loss %s  %.3g steps/s  ETA %s", step,
                   self.num_steps,
                   progress.by_member(train["train/loss"], self.run.plan.names),
                   rate, progress.fmt_time((self.num_steps - step) / rate))


def _eval_calls(steps, state, split: str, batches):
  """(batches done, {"loss_sum", "weight"}) per compiled call: of
  `step.eval_call_size` device-fed batches, else of one batch of `batches()`."""
  feed = steps.task.feed
  if steps.eval_many is not None and split in feed.eval_counts:
    n = feed.eval_counts[split]
    per_call = step_lib.eval_call_size(n)
    for start in range(0, n, per_call):
      indices = jnp.arange(start, start + per_call, dtype=jnp.int32)
      yield min(start + per_call, n), steps.eval_many(
          state.params, feed.eval_tokens[split], indices)
  else:
    for count, batch in enumerate(batches(), 1):
      yield count, steps.eval(state.params, batch)


def _evaluate(steps, state, every_s: float) -> dict[str, np.ndarray]:
  """`{split}/loss` (and `/ppl` for an LM) over every eval split."""
  out = {}
  for split, batches in steps.task.eval_splits.items():
    meter = progress.EvalMeter(split, steps.task.eval_sizes[split], every_s)
    total, count = None, 0
    for done, r in _eval_calls(steps, state, split, batches):
      meter.update(count, total)     # while this call computes
      total = r if total is None else jax.tree.map(jnp.add, total, r)
      count = done
    meter.done(count)
    total = jax.device_get(total)
    loss = total["loss_sum"] / np.maximum(total["weight"], 1e-30)
    out[f"{split}/loss"] = loss
    if steps.task.kind == "lm":
      out[f"{split}/ppl"] = np.exp(loss)
  return out


class EvalAction(PeriodicAction):
  """Valid/test loss every `eval_every` steps."""

  phase = "eval"

  def __init__(self, run, start: int, writers):
    super().__init__(run.plan.config.eval_every, run, start)
    self.writers = writers

  def begin(self, step: int, state) -> None:
    res = _evaluate(self.run.steps, state,
                    self.run.plan.config.progress_every_s)
    logging.info("step %d eval: %s", step, "; ".join(
        f"{k} {progress.by_member(v, self.run.plan.names)}"
        for k, v in res.items()))
    for i, w in enumerate(self.writers):
      w.write_scalars(step, {k: self.run.member_view(v, i)
                             for k, v in res.items()})


class CheckpointAction(PeriodicAction):
  """A checkpoint every `checkpoint_every` steps, if the steps were finite:
  `begin` copies the state's real members on the device (the next call
  takes the state, donated) and leaves the save for while it computes."""

  phase = "checkpoint"

  def __init__(self, run, start: int, pending: Pending,
               ckpt: ckpt_lib.Checkpointer, writers):
    super().__init__(run.plan.config.checkpoint_every, run, start)
    self.pending, self.ckpt, self.writers = pending, ckpt, writers

  def begin(self, step: int, state):
    self.pending.check_finite()
    copy = self.run.steps.saved(state)     # the real members (sweep.Layout)

    def save():
      self.ckpt.save(step, copy)
      for w in self.writers:
        w.flush()
    return save
