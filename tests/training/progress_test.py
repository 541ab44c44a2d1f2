"""Where a run's wall time goes (progress.PhaseClock and the loop)."""
import functools
import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest

from qkspec.training import actions
from qkspec.training import loop
from qkspec.training import progress
import testutil

# Each evaluation's added (fake) time in the run below: more than the clock
# readings of its steps and checkpoints add up to, so one evaluation
# counted in the wrong phase fails the test.
_EVAL_S = 10.0
_TICK_S = 0.001    # every reading of the fake clock advances it this much


class FakeClock:

  def __init__(self, tick: float = 0.0):
    self.now = 100.0
    self.tick = tick

  def __call__(self):
    self.now += self.tick
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


class LoopPhasesTest(absltest.TestCase):

  def test_run_info_splits_the_wall_time_by_phase(self):
    wd = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, wd, ignore_errors=True)
    fake = FakeClock(tick=_TICK_S)
    real = actions.EvalAction.begin

    def long_eval(self, step, state):  # _EVAL_S more per evaluation
      fake.now += _EVAL_S
      return real(self, step, state)

    with mock.patch.object(actions.EvalAction, "begin", long_eval), \
         mock.patch.object(progress, "PhaseClock", functools.partial(
             progress.PhaseClock, clock=fake)), \
         self.assertLogs(level="INFO") as logs:
      loop.train_and_evaluate(_config(), wd)
    with open(os.path.join(wd, progress.RUN_INFO)) as f:
      info = json.loads(f.readline())
    ph = info["phases_s"]
    self.assertContainsSubset(
        {"setup", "compile", "steps", "eval", "log", "checkpoint", "finish",
         "other"}, set(ph))
    # 3 evaluations, and their time in no other phase
    self.assertBetween(ph["eval"], 3 * _EVAL_S, 3 * _EVAL_S + 1.0)
    self.assertLess(ph["steps"] + ph["checkpoint"], 1.0)
    self.assertAlmostEqual(sum(ph.values()), info["wall_s"], delta=0.5)
    self.assertRegex("\n".join(logs.output),
                     r"wall [\d.]+ s: setup [\d.]+, compile [\d.]+, steps "
                     r"[\d.]+, eval [\d.]+, log [\d.]+, checkpoint [\d.]+, "
                     r"finish [\d.]+, other [\d.]+")


if __name__ == "__main__":
  absltest.main()
