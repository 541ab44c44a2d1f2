"""Where a run's wall time goes (progress.PhaseClock and the loop)."""
import json
import os
import shutil
import tempfile
import time
from unittest import mock

from absl.testing import absltest

from qkspec.training import actions
from qkspec.training import loop
from qkspec.training import progress
import testutil

# Each evaluation's added sleep in the run below: longer than the steps and
# checkpoints of its 6-step run take even on a loaded machine, so one sleep
# counted in the wrong phase fails the test.
_SLEEP_S = 2.0


class FakeClock:

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


class PhaseClockTest(absltest.TestCase):

  def test_phases_add_up_and_the_rest_is_other(self):
    t = FakeClock()
    clock = progress.PhaseClock(clock=t)
    with clock.phase("steps"):
      t.now += 2.0
    t.now += 0.5                       # in no phase
    with clock.phase("eval"):
      t.now += 1.0
    with clock.phase("steps"):
      t.now += 3.0
    clock.add("setup", 0.25)
    self.assertEqual(clock.summary(),
                     {"setup": 0.2, "steps": 5.0, "eval": 1.0, "other": 0.2})
    self.assertEqual(clock.describe(), "wall 6.5 s: setup 0.2, steps 5.0, "
                     "eval 1.0, other 0.2")
    with self.assertRaisesRegex(ValueError, "unknown phase 'evaluation'"):
      clock.add("evaluation", 1.0)

  def test_a_phase_that_raises_still_counts(self):
    t = FakeClock()
    clock = progress.PhaseClock(clock=t)
    with self.assertRaises(KeyboardInterrupt):
      with clock.phase("checkpoint"):
        t.now += 1.5
        raise KeyboardInterrupt
    self.assertEqual(clock.summary(), {"checkpoint": 1.5, "other": 0.0})


def _config():
  """One theory member (d=16, a few ms a step); eval every 2 of 6 steps."""
  c = testutil.get_config("theory_task", "smoke")
  c.sweep.kappa1, c.sweep.kappa2, c.sweep.target = (), (), ()
  c.num_steps = 6
  c.log_every, c.eval_every, c.checkpoint_every = 1, 2, 3
  c.precompile = False     # so the first step compiles on the main thread
  return c


@testutil.slow("a run whose evaluations sleep, its phases timed")
class LoopPhasesTest(absltest.TestCase):

  def test_run_info_splits_the_wall_time_by_phase(self):
    wd = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, wd, ignore_errors=True)
    real = actions.EvalAction.begin

    def slow_eval(self, step, state):  # _SLEEP_S more per evaluation
      time.sleep(_SLEEP_S)
      return real(self, step, state)

    with mock.patch.object(actions.EvalAction, "begin", slow_eval), \
         self.assertLogs(level="INFO") as logs:
      loop.train_and_evaluate(_config(), wd)
    with open(os.path.join(wd, progress.RUN_INFO)) as f:
      info = json.loads(f.readline())
    ph = info["phases_s"]
    self.assertContainsSubset(
        {"setup", "compile", "steps", "eval", "log", "checkpoint", "finish",
         "other"}, set(ph))
    self.assertGreaterEqual(ph["eval"], 3 * _SLEEP_S)  # 3 evaluations
    # the sleeps are the evaluations' own: not one of them in the steps or
    # checkpoints ("log" holds the per-layer measurements and their
    # compilation), which take ~0.2 s alone and ~1 s on a loaded CI machine
    self.assertLess(ph["steps"] + ph["checkpoint"], _SLEEP_S)
    self.assertGreater(ph["compile"], 0.0)
    self.assertAlmostEqual(sum(ph.values()), info["wall_s"], delta=0.5)
    self.assertRegex("\n".join(logs.output),
                     r"wall [\d.]+ s: setup [\d.]+, compile [\d.]+, steps "
                     r"[\d.]+, eval [\d.]+, log [\d.]+, checkpoint [\d.]+, "
                     r"finish [\d.]+, other [\d.]+")


if __name__ == "__main__":
  absltest.main()
