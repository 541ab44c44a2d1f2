"""qkspec.experiments.outputs: the heartbeat of long compiled computations."""
import logging
import threading

from absl.testing import absltest

from qkspec.experiments import outputs


class HeartbeatTest(absltest.TestCase):

  def test_logs_while_the_block_runs_and_stops_after(self):
    threads = set(threading.enumerate())
    three_beats = threading.Event()

    class Beats(logging.Handler):   # sets the event at the third beat

      count = 0

      def emit(self, record):
        if "work: still running" in record.getMessage():
          Beats.count += 1
          if Beats.count >= 3:
            three_beats.set()

    with self.assertLogs("absl", level="INFO") as logs:
      logging.getLogger("absl").addHandler(Beats())  # assertLogs' handlers
      with outputs.heartbeat("work", every_s=0.01):
        self.assertTrue(three_beats.wait(timeout=60.0),
                        "no three heartbeats")     # waits for the event
      # the beating thread has ended with the block: no beat can follow
      self.assertEqual(set(threading.enumerate()), threads)
      outputs.logging.info("done")
    beats = [m for m in logs.output if "work: still running" in m]
    self.assertGreaterEqual(len(beats), 3)
    done = [i for i, m in enumerate(logs.output) if "work: done in" in m]
    self.assertLen(done, 1)
    self.assertEqual(logs.output[done[0] + 1:], ["INFO:absl:done"])

  def test_quiet_for_short_work(self):
    with self.assertLogs("absl", level="INFO") as logs:
      with outputs.heartbeat("quick", every_s=30.0):
        pass
      outputs.logging.info("done")
    self.assertEqual([m for m in logs.output if "quick: still" in m], [])


if __name__ == "__main__":
  absltest.main()
