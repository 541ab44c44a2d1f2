"""Noticing a lost process of a multi-host run within seconds, in one line.

Every process runs a `Watchdog`: a thread publishes its heartbeat (a
count) in the coordination service's key-value store every `tick` seconds
and reads everyone's; a second thread, which never waits on the service
(so that a call that hangs is noticed too), judges. A process whose
heartbeat has not changed for `timeout_s` seconds is lost, and so is
process 0 when the service (which runs beside it) has not answered for
that long. Every other process then prints one line,

  qkspec: process K stopped answering after step S; the last checkpoint is
  step C; rerun the same command on every host to resume

and exits with status `LOST`, before jax's own timeout would abort it with
a native crash dump. The heartbeat runs off the training thread, so a long
step, compilation or checkpoint write does not hold it up; only a process
that holds Python's lock for `timeout_s` would (see BUILD.md for the
longest gap measured). A process that ends, or stops on a signal, says
"done" first, so that the others do not take its exit for a loss.
"""
import contextlib
import os
import sys
import threading
import time
from typing import Callable, Iterator

from qkspec.config import ConfigError

LOST = 75          # EX_TEMPFAIL (sysexits.h): try again, the run resumes
# Seconds a silent process is tolerated; BUILD.md says how it was chosen.
TIMEOUT_S = 10.0
_KEY = "qkspec/peers/"
_DONE = "done"

_active = None     # the Watchdog of this process, if it is one of several


class Watchdog:
  """Watches the other `num_processes - 1` processes through `client`
  (jax's coordination service client: `key_value_set`,
  `key_value_dir_get`)."""

  def __init__(self, client, process_id: int, num_processes: int,
               timeout_s: float, *, tick_s: float | None = None,
               exit_fn: Callable[[int], None] = os._exit,
               clock: Callable[[], float] = time.monotonic):
    self.client, self.process_id = client, process_id
    self.num_processes, self.timeout_s = num_processes, timeout_s
    self.tick_s = tick_s or min(1.0, timeout_s / 5)
    self._exit, self._clock = exit_fn, clock
    self._step: int | None = None
    self._checkpoint: Callable[[], int | None] = lambda: None
    self._beats = 0
    self._since = clock()                 # for processes not heard yet
    self._answered = self._since          # the service's last answer
    self._calling: float | None = None    # when the call under way began
    self._called = self._since            # when the last call began
    self._heard = {}                      # process -> (value, when it changed)
    self._stop = threading.Event()

  def start(self) -> "Watchdog":
    for target in (self._beat_loop, self._judge_loop):
      threading.Thread(target=target, daemon=True,
                       name=f"qkspec-{target.__name__[1:]}").start()
    return self

  def at_step(self, step: int) -> None:
    """The loop has reached `step` (named in the line)."""
    self._step = step

  def watch_checkpoints(self, completed: Callable[[], int | None]) -> None:
    """`completed()`: the last completed checkpoint's step, for the line."""
    self._checkpoint = completed

  def beat(self) -> None:
    """Publishes this process's heartbeat and reads everyone's."""
    self._calling = self._called = self._clock()
    try:
      self._exchange()
    finally:
      self._calling = None

  def _exchange(self) -> None:
    self._beats += 1
    self.client.key_value_set(f"{_KEY}{self.process_id}", str(self._beats),
                              allow_overwrite=True)
    now = self._clock()
    for key, value in self.client.key_value_dir_get(_KEY):
      process = int(key.rsplit("/", 1)[1])
      if self._heard.get(process, (None,))[0] != value:
        self._heard[process] = (value, now)
    self._answered = now

  def lost(self) -> int | None:
    """The process silent longest for over `timeout_s` seconds (0 if the
    service has not answered for that long), or None. Judged only on
    fresh news: a process that was itself frozen judges nobody."""
    now, fresh = self._clock(), 3 * self.tick_s
    if self._calling is not None:         # a call hangs: the host is gone?
      return 0 if now - self._calling > self.timeout_s else None
    if now - self._called > fresh:        # this process was held up
      return None
    if now - self._answered > self.timeout_s:
      return 0                            # calls fail: the service is gone
    if now - self._answered > fresh:
      return None
    silent = {p: now - self._heard.get(p, (None, self._since))[1]
              for p in range(self.num_processes) if p != self.process_id
              and self._heard.get(p, (None,))[0] != _DONE}
    worst = max(silent, key=silent.get, default=None)
    if worst is None or silent[worst] <= self.timeout_s:
      return None
    return worst

  def line(self, process: int) -> str:
    """The one line saying that `process` was lost, after the last step
    this process reached (every step is a collective of all)."""
    after = ("before the first step" if self._step is None
             else f"after step {self._step}")
    who = (f"process {process}" if process != self.process_id else
           "the coordination service beside process 0")
    checkpoint = self._checkpoint()
    if checkpoint is None:
      saved, to = "no checkpoint was written yet", "start again"
    else:
      saved, to = f"the last checkpoint is step {checkpoint}", "resume"
    return (f"qkspec: {who} stopped answering {after}; {saved}; rerun the "
            f"same command on every host to {to}")

  def report(self, process: int) -> None:
    """Prints `line(process)` and exits with `LOST`."""
    sys.stderr.write(self.line(process) + "\n")
    sys.stderr.flush()
    self._exit(LOST)

  def settle(self) -> None:
    """Waits long enough for a lost process to be noticed (then the
    process exits); returns if none is."""
    self._stop.wait(self.timeout_s + 3 * self.tick_s)

  def stop(self, done: bool) -> None:
    """Stops watching; `done`: tells the others that this process ends."""
    self._stop.set()
    if done:
      try:
        self.client.key_value_set(f"{_KEY}{self.process_id}", _DONE,
                                  allow_overwrite=True)
      except Exception:  # pylint: disable=broad-except
        pass               # the service is gone: nobody is left to tell

  def _beat_loop(self) -> None:
    while not self._stop.is_set():
      try:
        self.beat()
      except Exception:  # pylint: disable=broad-except
        pass               # unanswered: `lost` counts the silence
      self._stop.wait(self.tick_s)

  def _judge_loop(self) -> None:
    while not self._stop.wait(self.tick_s):
      process = self.lost()
      if process is not None and not self._stop.is_set():
        self.report(process)


def start(client, process_id: int, num_processes: int,
          timeout_s: float) -> Watchdog:
  """Starts this process's Watchdog (`at_step` and the others reach it)."""
  global _active
  _active = Watchdog(client, process_id, num_processes, timeout_s).start()
  return _active


def at_step(step: int) -> None:
  """Tells the watchdog, if any, that the loop has reached `step`."""
  if _active is not None:
    _active.at_step(step)


def watch_checkpoints(completed: Callable[[], int | None]) -> None:
  """Tells the watchdog, if any, where to read the last checkpoint."""
  if _active is not None:
    _active.watch_checkpoints(completed)


def finish(done: bool) -> None:
  """Stops the watchdog, if any (`Watchdog.stop`)."""
  global _active
  if _active is not None:
    _active.stop(done)
    _active = None


@contextlib.contextmanager
def watched() -> Iterator[None]:
  """Ends the watch, if any, with the block: "done" when it ends well, on a
  signal or a usage error (every process stops alike); after an error, once
  a lost process has had the time to be noticed (a collective with a dead
  process may fail before the watchdog speaks, which then exits)."""
  try:
    yield
  except (KeyboardInterrupt, ConfigError):
    finish(done=True)
    raise
  except BaseException:
    if _active is not None:
      _active.settle()
    finish(done=False)
    raise
  finish(done=True)
