"""Stopping a run at a step boundary on Ctrl-C (SIGINT) or SIGTERM.

The compiled step donates its input state, so a stop raised while a step
runs would leave nothing to save: inside `deferred_stop()` a signal only
marks the yielded `StopFlag`, which the loop asks at every step boundary
(`StopFlag.at_boundary`); where it says stop, the loop saves a checkpoint
and raises `Interrupted`.

* One process: the first SIGINT, or a SIGTERM (what a cluster sends before
  it preempts a job), marks the flag; the next boundary stops. A second
  SIGINT raises KeyboardInterrupt at once.
* Several processes (`jax.distributed`): a process that stopped alone would
  leave the others waiting in a collective. `jax.distributed.initialize`
  installs JAX's preemption notifier, which catches SIGTERM and tells the
  coordination service; every process then stops at the same boundary,
  where `jax.experimental.multihost_utils.reached_preemption_sync_point`
  first returns True. A Python SIGTERM handler would replace JAX's, so none
  is installed; the first SIGINT is sent on to this process as SIGTERM.

`Interrupted.signum` is the signal: SIGINT where this process got Ctrl-C,
else SIGTERM (also where another process's signal started the stop). The
command line exits with 128 + it: 130 or 143 (`qkspec.experiments.cli`).
"""
import contextlib
import itertools
import os
import signal
import threading
from typing import Iterator

from absl import logging
import jax
from jax.experimental import multihost_utils

# The sync point compares a call counter that must grow by one per call, on
# every process alike: the boundaries this process has asked about.
_calls = itertools.count()


class Interrupted(KeyboardInterrupt):
  """Training stopped by a signal (a KeyboardInterrupt, which `except
  Exception` lets through).

  Attributes:
    what: where it stopped and what it saved ("interrupted at step 12:
      checkpoint .../ckpt/12 saved").
    workdir: the run's directory (absolute).
    signum: signal.SIGINT (Ctrl-C to this process) or signal.SIGTERM.
  """

  def __init__(self, what: str, workdir: str, signum: int):
    super().__init__(f"{what}; to resume, rerun the same command with "
                     f"--workdir {workdir}.")
    self.what, self.workdir, self.signum = what, workdir, signum


class StopFlag:
  """Whether the loop stops at a step boundary, and why.

  Attributes:
    signum: the signal this process got first (None: none).
    coordinated: JAX's preemption sync point decides (several processes).
    stopping: `at_boundary` said stop (all processes stop at this boundary).
  """

  def __init__(self, coordinated: bool = False):
    self.signum: int | None = None
    self.coordinated = coordinated
    self.stopping = False

  def at_boundary(self) -> bool:
    """Asked once at each step boundary (on every process): stop here?"""
    if self.coordinated:
      self.stopping = multihost_utils.reached_preemption_sync_point(
          next(_calls))
    else:
      self.stopping = self.signum is not None
    return self.stopping

  def cause(self) -> int:
    """The signal that `Interrupted` reports: SIGINT for a KeyboardInterrupt
    that did not wait for the boundary (a second Ctrl-C)."""
    if not self.stopping:
      return signal.SIGINT
    return self.signum or signal.SIGTERM

  def describe(self, step: int) -> str:
    """"interrupted at step 12", or "stopped by SIGTERM at step 12"."""
    if self.cause() == signal.SIGINT:
      return f"interrupted at step {step}"
    if self.coordinated:
      return (f"stopped by SIGTERM (to this or another process) at step "
              f"{step}")
    return f"stopped by SIGTERM at step {step}"


def _coordinated() -> bool:
  """Whether JAX's preemption service decides (several processes, with it
  on; it is by default)."""
  if jax.process_count() == 1:
    return False
  if getattr(jax.config, "jax_enable_preemption_service", True):
    return True
  logging.warning("jax_enable_preemption_service is off: SIGTERM and Ctrl-C "
                  "stop this process only, and the others wait for it.")
  return False


@contextlib.contextmanager
def deferred_stop() -> Iterator[StopFlag]:
  """Within: the signals mark the yielded flag (module docstring).

  Outside the main thread (where signal handlers cannot be set) only a
  coordinated stop (SIGTERM to any process of several) takes effect, and
  Ctrl-C raises KeyboardInterrupt as usual.
  """
  flag = StopFlag(_coordinated())
  if threading.current_thread() is not threading.main_thread():
    yield flag
    return
  previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

  def on_sigint(signum, frame):
    del signum, frame
    signal.signal(signal.SIGINT, previous[signal.SIGINT])
    flag.signum = flag.signum or signal.SIGINT
    if flag.coordinated:
      os.kill(os.getpid(), signal.SIGTERM)   # to JAX's preemption notifier
      logging.warning("Ctrl-C: every process stops at the same step and "
                      "saves a checkpoint; Ctrl-C again to stop this one at "
                      "once.")
    else:
      logging.warning("Ctrl-C: stopping after the current step (or "
                      "evaluation) and saving a checkpoint; Ctrl-C again to "
                      "stop at once.")

  def on_sigterm(signum, frame):
    del signum, frame
    if flag.signum is None:
      flag.signum = signal.SIGTERM
      logging.warning("SIGTERM: stopping after the current step (or "
                      "evaluation) and saving a checkpoint.")

  signal.signal(signal.SIGINT, on_sigint)
  if not flag.coordinated:
    signal.signal(signal.SIGTERM, on_sigterm)
  try:
    yield flag
  finally:
    for s, handler in previous.items():
      if s == signal.SIGINT or not flag.coordinated:
        signal.signal(s, signal.SIG_DFL if handler is None else handler)
