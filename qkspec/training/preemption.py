"""Stopping a run at a step boundary on Ctrl-C (SIGINT) or SIGTERM.

The compiled step donates its input state, so inside `deferred_stop()` the
first SIGINT or a SIGTERM only marks the `StopFlag` the loop asks at every
step boundary, where it saves a checkpoint and raises `Interrupted`; a
second SIGINT raises KeyboardInterrupt at once, whatever handler SIGINT had
before: Python's own, `SIG_IGN` (a process started in the background by a
shell without job control inherits SIGINT ignored), `SIG_DFL`, a handler
that does not raise, or the handler of an enclosing `deferred_stop`. The
previous handlers are put back when the block ends.

With several processes JAX's preemption notifier (installed by
`jax.distributed.initialize`) takes SIGTERM (no Python handler replaces
it), the first SIGINT is sent on as SIGTERM, and every process stops at the
boundary where `multihost_utils.reached_preemption_sync_point` first says
so. The
command line exits with 128 + `Interrupted.signum` (`qkspec.cli`).
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
  Exception` lets through): `what` happened, the absolute `workdir`, and
  `signum`, SIGINT (Ctrl-C to this process) or SIGTERM."""

  def __init__(self, what: str, workdir: str, signum: int):
    super().__init__(f"{what}; to resume, rerun the same command with "
                     f"--workdir {workdir}.")
    self.what, self.workdir, self.signum = what, workdir, signum


class StopFlag:
  """Whether the loop stops at a step boundary: `signum`, the first signal
  (or None); `coordinated`, JAX's sync point decides; `stopping`,
  `at_boundary` said stop; `ctrl_c`, a SIGINT came (the next one raises)."""

  def __init__(self, coordinated: bool):
    self.signum: int | None = None
    self.ctrl_c = False
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


@contextlib.contextmanager
def deferred_stop() -> Iterator[StopFlag]:
  """Within, the signals mark the yielded flag; off the main thread only a
  coordinated stop takes effect (Ctrl-C raises as usual)."""
  flag = StopFlag(coordinated=jax.process_count() > 1)
  if threading.current_thread() is not threading.main_thread():
    yield flag
    return
  previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

  def on_sigint(signum, frame):
    del signum, frame
    if flag.ctrl_c:
      raise KeyboardInterrupt   # the second Ctrl-C: at once
    flag.ctrl_c = True
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
