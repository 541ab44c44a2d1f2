"""Ctrl-C during training: stop at a step boundary, where the state is whole.

The compiled train step donates its input state, so a KeyboardInterrupt
raised while a step runs leaves a deleted state behind ("Array has been
deleted") and nothing to save. Inside `deferred_sigint()` the first Ctrl-C
only sets a flag that the loop reads between steps; the loop then saves a
checkpoint and raises `Interrupted`. A second Ctrl-C restores Python's
handler and interrupts at once.

The loop logs `Interrupted`'s message (where the checkpoint is, how to
resume) as it raises it. A command line turns any KeyboardInterrupt into
exit status 130 without a traceback with `exit_on_interrupt()`.
"""
import contextlib
import signal
import sys
import threading
import traceback
from typing import Iterator

from absl import logging

EXIT_STATUS = 130             # 128 + SIGINT, what shells report for Ctrl-C


class Interrupted(KeyboardInterrupt):
  """Training stopped by Ctrl-C; the message says what was saved."""


class StopFlag:
  """Set by the first Ctrl-C inside `deferred_sigint`."""

  def __init__(self):
    self.requested = False


@contextlib.contextmanager
def deferred_sigint() -> Iterator[StopFlag]:
  """Within: the first SIGINT sets the yielded flag, a second raises.

  Outside the main thread (where signal handlers cannot be set) the flag is
  never set and Ctrl-C raises KeyboardInterrupt as usual.
  """
  flag = StopFlag()
  if threading.current_thread() is not threading.main_thread():
    yield flag
    return
  previous = signal.getsignal(signal.SIGINT)

  def handler(signum, frame):
    del signum, frame
    signal.signal(signal.SIGINT, previous)
    flag.requested = True
    logging.warning("Ctrl-C: stopping after the current step (or "
                    "evaluation) and saving a checkpoint; Ctrl-C again to "
                    "stop at once.")

  signal.signal(signal.SIGINT, handler)
  try:
    yield flag
  finally:
    signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def exit_on_interrupt(verbose: bool = False) -> Iterator[None]:
  """For a main: KeyboardInterrupt -> exit 130 and at most one line.

  `Interrupted` was logged by the loop already; another KeyboardInterrupt
  (before training started, say) prints "qkspec: interrupted". `verbose`
  prints the traceback first.
  """
  try:
    yield
  except KeyboardInterrupt as e:
    if verbose:
      traceback.print_exception(e)
    if not isinstance(e, Interrupted):
      print("qkspec: interrupted", file=sys.stderr, flush=True)
    sys.exit(EXIT_STATUS)
