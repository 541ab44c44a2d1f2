"""Progress lines of a long run, where its outputs are, where its time went.

`ProgressAction` and `EvalMeter` print steps/s and ETA every
`config.progress_every_s` seconds; `PhaseClock` splits an invocation's wall
time by phase ("other": what no phase holds) for run_info.jsonl.
"""
import contextlib
import json
import os
import time
from typing import Callable, Sequence

from absl import logging
import jax
import numpy as np


def fmt_time(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def by_member(values, names: Sequence[str]) -> str:
  """"kappa2=0: 5.123; kappa2=1: 5.12" for a sweep, "5.123" for one run."""
  values = np.ravel(values)
  if len(values) == 1 and len(names) == 1:
    return f"{values[0]:.4g}"
  return "; ".join(f"{n}: {v:.4g}" for n, v in zip(names, values))


class ProgressAction:
  """Compilation notice, then steps/s and ETA every `every_s` seconds (0:
  every step), except at steps `quiet_at` (log steps print their own)."""

  phase = "log"          # its wall time, for `PhaseClock`

  def __init__(self, every_s: float, start: int, num_steps: int,
               quiet_at: Callable[[int], bool]):
    self.every_s, self.start, self.num_steps = every_s, start, num_steps
    self._quiet_at = quiet_at
    self._first = None             # (time, step) once the first step is done
    self._last = time.monotonic()

  def due(self, step: int) -> bool:
    # The start, and the first call's end (step start+1, or start+k when
    # k steps run per call).
    if step == self.start or (self._first is not None
                              and self._first[1] == self.start):
      return True
    if step >= self.num_steps:
      return False
    if self._quiet_at(step):
      self._last = time.monotonic()
      return False
    return time.monotonic() - self._last >= self.every_s

  def begin(self, step: int, state) -> None:
    """Runs all of it now (the loop's `actions.PeriodicAction.begin`)."""
    jax.block_until_ready(state.step)
    now = self._last = time.monotonic()
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
  """Progress of one eval split of `total` batches: a line every `every_s`
  seconds (0: every batch)."""

  def __init__(self, split: str, total: int, every_s: float):
    self.split, self.total, self.every_s = split, total, every_s
    self._t0 = self._last = time.monotonic()
    self._printed = False

  def update(self, done: int, pending) -> None:
    """Waits for `pending`, the sum of the first `done` batches (so a line
    counts computed batches); maybe a line."""
    if not done:
      return
    jax.block_until_ready(pending)
    now = time.monotonic()
    if now - self._last < self.every_s:
      return
    self._last = now
    elapsed = now - self._t0
    logging.info("eval %s: %d/%d batches, %s elapsed, ETA %s", self.split,
                 done, self.total, fmt_time(elapsed),
                 fmt_time(elapsed / done * (self.total - done)))
    self._printed = True

  def done(self, count: int) -> None:
    if self._printed:
      logging.info("eval %s: %d batches done in %s", self.split, count,
                   fmt_time(time.monotonic() - self._t0))


def outputs_summary(run, ckpt) -> str:
  """Where the outputs of the loop's `run` are and the command that plots
  them; `ckpt`: its `checkpoint.Checkpointer`."""
  workdir = os.path.abspath(run.workdir)
  if len(run.dirs) == 1:
    metrics = os.path.join(os.path.abspath(run.dirs[0]), "metrics.jsonl")
  else:
    metrics = (os.path.join(workdir, "<member>", "metrics.jsonl")
               + f" for the {len(run.dirs)} members "
               + " ".join(run.plan.names))
  steps = ", ".join(map(str, ckpt.all_steps())) or "none"
  return "\n".join((
      f"outputs in {workdir}:",
      "  config.json, members.json (the config and the sweep members)",
      f"  metrics: {metrics}",
      f"  checkpoints: {ckpt.directory} (steps {steps})",
      f"  plot: python launch/plot_training.py --workdir {workdir}",
      f"  resume or extend: rerun with --workdir {workdir} (and a larger "
      "--config.num_steps to train on)"))


PHASES = ("setup", "compile", "steps", "eval", "log", "checkpoint",
          "finish")


class PhaseClock:
  """Wall seconds per named phase of one invocation, from its creation."""

  def __init__(self, clock=time.time):
    self._clock = clock
    self.t0 = clock()
    self.seconds: dict[str, float] = {}

  def elapsed(self) -> float:
    """Wall seconds since t0."""
    return self._clock() - self.t0

  def add(self, name: str, seconds: float) -> None:
    if name not in PHASES:
      raise ValueError(f"unknown phase {name!r}; one of {PHASES}")
    self.seconds[name] = self.seconds.get(name, 0.0) + seconds

  @contextlib.contextmanager
  def phase(self, name: str):
    """Adds the wall time of the `with` body to phase `name`."""
    start = self._clock()
    try:
      yield
    finally:
      self.add(name, self._clock() - start)

  def summary(self) -> dict[str, float]:
    """{phase: seconds} in PHASES order (those that ran), and "other": the
    wall time since t0 that no phase holds."""
    out = {k: round(self.seconds[k], 1) for k in PHASES if k in self.seconds}
    out["other"] = round(max(self.elapsed() - sum(self.seconds.values()),
                             0.0), 1)
    return out

  def describe(self) -> str:
    """"wall 159.1 s: setup 4.2, compile 11.3, steps 124.0, ..." """
    parts = ", ".join(f"{k} {v:.1f}" for k, v in self.summary().items())
    return f"wall {self.elapsed():.1f} s: {parts}"


RUN_INFO = "run_info.jsonl"


def record_invocation(run, start: int, end: int, clock: PhaseClock,
                      interrupted: bool = False) -> None:
  """Appends a line to `<workdir>/run_info.jsonl`: steps `start`..`end`,
  wall seconds by phase, device, precision, steps per call, `interrupted`
  (a resumed run has one per invocation; launch/report.py sums them)."""
  line = {"start_step": start, "end_step": end,
          "wall_s": round(clock.elapsed(), 1),
          "phases_s": clock.summary(),
          "device_kind": jax.devices()[0].device_kind,
          "device_count": jax.device_count(),
          "process_count": jax.process_count(),
          "compute_dtype": run.plan.config.compute_dtype,
          "steps_per_call": run.steps.steps_per_call,
          "members": len(run.plan.members), "jax": jax.__version__,
          "interrupted": interrupted,
          "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
  with open(os.path.join(run.workdir, RUN_INFO), "a") as f:
    f.write(json.dumps(line) + "\n")
