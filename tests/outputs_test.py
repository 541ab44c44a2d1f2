"""qkspec.experiments.outputs: the heartbeat of long compiled computations."""
import time

from absl.testing import absltest

from qkspec.experiments import outputs


class HeartbeatTest(absltest.TestCase):

  def test_logs_while_the_block_runs_and_stops_after(self):
    with self.assertLogs("absl", level="INFO") as logs:
      with outputs.heartbeat("work", every_s=0.05):
        time.sleep(0.32)
      after = len(logs.output)
      time.sleep(0.2)
      outputs.logging.info("done")       # assertLogs needs >= 1 line anyway
    beats = [m for m in logs.output if "work: still running" in m]
    self.assertGreaterEqual(len(beats), 3)
    self.assertLen([m for m in logs.output if "work: done in" in m], 1)
    self.assertLen(logs.output, after + 1)   # no beat after the block

  def test_quiet_for_short_work(self):
    with self.assertLogs("absl", level="INFO") as logs:
      with outputs.heartbeat("quick", every_s=30.0):
        pass
      outputs.logging.info("done")
    self.assertEqual([m for m in logs.output if "quick: still" in m], [])


if __name__ == "__main__":
  absltest.main()
