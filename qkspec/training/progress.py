"""Progress lines of a long run, and where a finished run's outputs are.

* `ProgressAction` (a loop action): a notice while the first step compiles,
  then steps/s and ETA every `config.progress_every_s` seconds between the
  log steps (which print their own line);
* `EvalMeter`: batches done / total, elapsed and ETA of one eval split at the
  same interval;
* `by_member`: a value per sweep member, labelled with the member's name;
* `outputs_summary`: the files a run wrote and how to plot them.
"""
import os
import time
from typing import Callable, Sequence

from absl import logging
import jax
import numpy as np


def fmt_time(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def by_member(values, names: Sequence[str], precision: int = 4) -> str:
  """"kappa2=0: 5.123; kappa2=1: 5.12" for a sweep, "5.123" for one run."""
  values = np.atleast_1d(np.asarray(values)).reshape(-1)
  if len(values) == 1 and len(names) == 1:
    return f"{values[0]:.{precision}g}"
  return "; ".join(f"{n}: {v:.{precision}g}" for n, v in zip(names, values))


class ProgressAction:
  """Compilation notice, then steps/s and ETA every `every_s` seconds.

  Args:
    every_s: seconds between lines (0: at every step).
    start: the step the run starts (or resumes) at.
    num_steps: the last step.
    quiet_at: steps at which another line already reports (log steps).
    clock: seconds (tests may pass a fake).
  """

  phase = "log"          # its wall time, for `qkspec.training.phases`

  def __init__(self, every_s: float, start: int, num_steps: int,
               quiet_at: Callable[[int], bool],
               clock: Callable[[], float] = time.monotonic):
    self.every_s, self.start, self.num_steps = every_s, start, num_steps
    self._quiet_at, self._clock = quiet_at, clock
    self._first = None             # (time, step) once the first step is done
    self._last = clock()

  def due(self, step: int) -> bool:
    # The start, and the first call's end (step start+1, or start+k when
    # k steps run per call).
    if step == self.start or (self._first is not None
                              and self._first[1] == self.start):
      return True
    if step >= self.num_steps:
      return False
    if self._quiet_at(step):
      self._last = self._clock()
      return False
    return self._clock() - self._last >= self.every_s

  def begin(self, step: int, state) -> None:
    """The loop's call (`actions.PeriodicAction.begin`): all of it now."""
    self(step, state)

  def __call__(self, step: int, state) -> None:
    jax.block_until_ready(state.step)
    now = self._last = self._clock()
    if step == self.start:
      logging.info("step %d/%d: compiling the train step (the first step "
                   "can take a minute)...", step, self.num_steps)
      self._first = (now, step)
    elif self._first[1] == self.start:
      what = ("first step" if step == self.start + 1
              else f"first {step - self.start} steps")
      logging.info("step %d/%d: %s done in %s (compilation included)", step,
                   self.num_steps, what, fmt_time(now - self._first[0]))
      self._first = (now, step)
    else:
      rate = (step - self._first[1]) / max(now - self._first[0], 1e-9)
      logging.info("step %d/%d  %.3g steps/s  ETA %s", step, self.num_steps,
                   rate, fmt_time((self.num_steps - step) / rate))


class EvalMeter:
  """Progress of one eval split: a line every `every_s` seconds.

  Args:
    split: its name.
    total: its batches (None: unknown).
    every_s: seconds between lines (0: every batch).
  """

  def __init__(self, split: str, total: int | None, every_s: float,
               clock: Callable[[], float] = time.monotonic):
    self.split, self.total, self.every_s = split, total, every_s
    self._clock = clock
    self._t0 = self._last = clock()
    self._printed = False

  def update(self, done: int, pending) -> None:
    """Waits for `pending`, the sum of the first `done` batches; maybe a line.

    Waiting keeps the host at most one batch ahead of the device, so the
    lines come at the interval and their counts are computed batches.
    """
    if not done:
      return
    jax.block_until_ready(pending)
    now = self._clock()
    if now - self._last < self.every_s:
      return
    self._last = now
    elapsed = now - self._t0
    if self.total:
      eta = elapsed / done * (self.total - done)
      logging.info("eval %s: %d/%d batches, %s elapsed, ETA %s", self.split,
                   done, self.total, fmt_time(elapsed), fmt_time(eta))
    else:
      logging.info("eval %s: %d batches, %s elapsed", self.split, done,
                   fmt_time(elapsed))
    self._printed = True

  def done(self, count: int) -> None:
    if self._printed:
      logging.info("eval %s: %d batches done in %s", self.split, count,
                   fmt_time(self._clock() - self._t0))


def outputs_summary(workdir: str, dirs: Sequence[str], names: Sequence[str],
                    ckpt_dir: str, ckpt_steps: Sequence[int]) -> str:
  """Where a run's outputs are and the command that plots them."""
  workdir = os.path.abspath(workdir)
  if len(dirs) == 1:
    metrics = os.path.join(os.path.abspath(dirs[0]), "metrics.jsonl")
  else:
    metrics = (os.path.join(workdir, "<member>", "metrics.jsonl")
               + f" for the {len(dirs)} members " + " ".join(names))
  steps = ", ".join(map(str, ckpt_steps)) or "none"
  return "\n".join((
      f"outputs in {workdir}:",
      "  config.json, members.json (the config and the sweep members)",
      f"  metrics: {metrics}",
      f"  checkpoints: {ckpt_dir} (steps {steps})",
      f"  plot: python launch/plot_training.py --workdir {workdir}",
      f"  resume or extend: rerun with --workdir {workdir} (and a larger "
      "--config.num_steps to train on)"))
