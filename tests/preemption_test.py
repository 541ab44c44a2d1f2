"""Tests for qkspec.training.preemption: signals to a stop at a boundary."""
import os
import signal
import threading

from absl.testing import absltest

from qkspec.training import preemption


def _send(signum):
  os.kill(os.getpid(), signum)   # handled before os.kill returns (main thread)


class DeferredStopTest(absltest.TestCase):

  def test_sigterm_stops_at_the_next_boundary(self):
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT,
                                                 signal.SIGTERM)}
    with preemption.deferred_stop() as flag:
      self.assertFalse(flag.at_boundary())
      _send(signal.SIGTERM)
      _send(signal.SIGINT)             # the first signal is the cause
      self.assertTrue(flag.at_boundary())
      self.assertEqual(flag.cause(), signal.SIGTERM)
      self.assertEqual(flag.describe(7), "stopped by SIGTERM at step 7")
    self.assertEqual({s: signal.getsignal(s) for s in handlers}, handlers)

  def test_a_second_ctrl_c_raises_at_once(self):
    with preemption.deferred_stop() as flag:
      _send(signal.SIGINT)
      self.assertTrue(flag.at_boundary())
      self.assertEqual(flag.describe(3), "interrupted at step 3")
      with self.assertRaises(KeyboardInterrupt):
        _send(signal.SIGINT)

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
