"""Tests for qkspec.training.preemption: signals to a stop at a boundary."""
import contextlib
import signal
import threading
import time

from absl.testing import absltest
from absl.testing import parameterized

from qkspec.training import preemption

_WAIT_S = 30


def _send(signum, handled):
  """Sends `signum` to the main thread (this one) and waits until
  `handled()`, or for a handler to raise: Python runs signal handlers on the
  main thread only, and a signal the kernel hands to another thread reaches
  its handler only when the main thread next runs Python. Waiting on the
  effect, not on time, makes the order of the suite irrelevant."""
  signal.pthread_kill(threading.main_thread().ident, signum)
  deadline = time.monotonic() + _WAIT_S
  while not handled() and time.monotonic() < deadline:
    time.sleep(0.001)            # a handler that raises, raises from here


def _never():
  return False


def _ignore(signum, frame):
  del signum, frame


@contextlib.contextmanager
def _sigint(handler):
  """SIGINT's handler is `handler` within, as a parent process or an
  enclosing block may have left it."""
  before = signal.signal(signal.SIGINT, handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def _enclosing_deferred_stop():
  with preemption.deferred_stop():
    yield


class DeferredStopTest(parameterized.TestCase):

  def test_sigterm_stops_at_the_next_boundary(self):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT,
                                                 signal.SIGTERM)}
    with preemption.deferred_stop() as flag:
      self.assertFalse(flag.at_boundary())
      _send(signal.SIGTERM, lambda: flag.signum is not None)
      _send(signal.SIGINT, lambda: flag.ctrl_c)  # the first is the cause
      self.assertTrue(flag.at_boundary())
      self.assertEqual(flag.cause(), signal.SIGTERM)
      self.assertEqual(flag.describe(7), "stopped by SIGTERM at step 7")
    self.assertEqual({s: signal.getsignal(s) for s in handlers}, handlers)

  @parameterized.named_parameters(
      ("python_default", signal.default_int_handler),
      # A process started in the background by a shell without job control
      # (`cmd &`, as a CI harness may) inherits SIGINT ignored.
      ("ignored", signal.SIG_IGN),
      ("a_handler_that_does_not_raise", _ignore))
  def test_a_second_ctrl_c_raises_at_once(self, before):
    with _sigint(before):
      with preemption.deferred_stop() as flag:
        _send(signal.SIGINT, lambda: flag.ctrl_c)
        self.assertTrue(flag.at_boundary())
        self.assertEqual(flag.describe(3), "interrupted at step 3")
        with self.assertRaises(KeyboardInterrupt):
          _send(signal.SIGINT, _never)
      self.assertIs(signal.getsignal(signal.SIGINT), before)

  def test_a_second_ctrl_c_in_a_nested_block_raises_at_once(self):
    with _enclosing_deferred_stop():
      outer = signal.getsignal(signal.SIGINT)
      with preemption.deferred_stop() as flag:
        _send(signal.SIGINT, lambda: flag.ctrl_c)
        with self.assertRaises(KeyboardInterrupt):
          _send(signal.SIGINT, _never)
      self.assertIs(signal.getsignal(signal.SIGINT), outer)

  def test_before_any_boundary_the_cause_is_ctrl_c(self):
    flag = preemption.StopFlag(coordinated=False)
    flag.signum = signal.SIGTERM       # a signal, not yet at a boundary
    self.assertEqual(flag.cause(), signal.SIGINT)

  def test_off_the_main_thread_no_handler_is_installed(self):
    handler = signal.getsignal(signal.SIGTERM)
    seen = []

    def body():
      with preemption.deferred_stop() as flag:
        seen.append(signal.getsignal(signal.SIGTERM))
        seen.append(flag.at_boundary())

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    self.assertEqual(seen, [handler, False])

  def test_interrupted_names_the_workdir(self):
    e = preemption.Interrupted("interrupted at step 3", "/w", signal.SIGINT)
    self.assertIsInstance(e, KeyboardInterrupt)
    self.assertEqual(str(e), "interrupted at step 3; to resume, rerun the "
                     "same command with --workdir /w.")


if __name__ == "__main__":
  absltest.main()
