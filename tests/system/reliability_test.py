"""Long runs a user can trust: damaged checkpoints, Ctrl-C and SIGTERM, no
duplicates.

Tests of qkspec.training.loop with its helpers checkpoint, preemption,
metric_writer and progress on the one-member theory smoke config (d=16,
T=B=8, a few ms per step).
"""
import contextlib
import gc
import glob
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
from absl.testing import parameterized

from qkspec.training import checkpoint
from qkspec.training import loop
from qkspec.training import metric_writer
import testutil



def _config(num_steps):
  """One theory member; a record every step, eval and checkpoint every 2."""
  c = testutil.get_config("theory_task", "smoke")
  c.sweep.kappa1, c.sweep.kappa2, c.sweep.target = (), (), ()
  c.locater.kappa1, c.locater.kappa2 = 1.0, 1.0
  c.num_steps = num_steps
  c.log_every, c.eval_every, c.checkpoint_every = 1, 2, 2
  c.progress_every_s = 0.0
  return c


def _steps_once(test, records):
  """Asserts that each step's keys are written once; the steps."""
  seen = set()
  for r in records:
    for k in r:
      if k != "step":
        test.assertNotIn((r["step"], k), seen, "a record written twice")
        seen.add((r["step"], k))
  return sorted({r["step"] for r in records})


def _tempdir(test):
  path = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, path, ignore_errors=True)
  return path


def _damage(step_dir, how):
  """Damages a checkpoint folder as a killed or full-disk run leaves it."""
  if how == "truncated_data":        # OCDBT OUT_OF_RANGE
    for f in glob.glob(os.path.join(step_dir, "state", "**", "d", "*"),
                       recursive=True):
      open(f, "w").close()
  elif how == "empty_folder":        # KeyError 'meta'
    shutil.rmtree(step_dir)
    os.mkdir(step_dir)
  elif how == "state_deleted":       # KeyError 'state'
    shutil.rmtree(os.path.join(step_dir, "state"))
  elif how == "truncated_metadata":  # JSONDecodeError
    path = os.path.join(step_dir, "meta", "metadata")
    text = open(path).read()
    open(path, "w").write(text[:len(text) // 2])
  elif how == "killed_before_save":  # never written
    shutil.rmtree(step_dir)


class DamagedCheckpointTest(parameterized.TestCase):
  """A 4-step run (checkpoints 2, 4) with checkpoint 4 damaged, resumed to 6,
  equals a straight 6-step run, and each metric record appears once."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.straight = loop.train_and_evaluate(
        _config(6), os.path.join(cls.tmp, "straight"))
    cls.straight_records = testutil.metric_records(
        os.path.join(cls.tmp, "straight"))
    cls.base = os.path.join(cls.tmp, "base")
    loop.train_and_evaluate(_config(4), cls.base)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp, ignore_errors=True)
    super().tearDownClass()

  def _damaged_copy(self, how, steps=(4,)):
    wd = os.path.join(_tempdir(self), "run")
    shutil.copytree(self.base, wd)
    self.assertEqual(checkpoint.Checkpointer(wd).all_steps(), [2, 4])
    for s in steps:
      _damage(os.path.join(wd, "ckpt", str(s)), how)
    return wd

  @parameterized.named_parameters(
      (how, how) for how in ("truncated_data", "empty_folder", "state_deleted",
                             "truncated_metadata", "killed_before_save"))
  def test_falls_back_to_the_previous_checkpoint(self, how):
    wd = self._damaged_copy(how)
    err = io.StringIO()
    with self.assertLogs(level="INFO") as logs, \
         contextlib.redirect_stderr(err):
      resumed = loop.train_and_evaluate(_config(6), wd)
      gc.collect()     # orbax's abandoned reads end here or at exit
    self.assertEqual(err.getvalue(), "")    # no "Exception ignored in ..."
    text = "\n".join(logs.output)
    if how != "killed_before_save":
      warnings = [l for l in logs.output if l.startswith("WARNING")]
      self.assertLen(warnings, 1)
      self.assertRegex(warnings[0], "checkpoint .* cannot be restored .*: "
                       "moved to .*ckpt_damaged, resuming from step 2$")
      self.assertIn(os.path.join(wd, "ckpt", "4"), warnings[0])
      self.assertNotIn("\n", warnings[0])
      self.assertTrue(os.path.isdir(os.path.join(wd, "ckpt_damaged", "4")))
    self.assertIn("resumed from step 2", text)
    self.assertEqual(checkpoint.Checkpointer(wd).all_steps(), [4, 6])
    testutil.assert_trees_equal(resumed, self.straight)
    records = testutil.metric_records(wd)
    self.assertEqual(_steps_once(self, records), list(range(7)))
    self.assertEqual(records, self.straight_records)

  def test_none_restores_one_error_naming_the_folder(self):
    wd = self._damaged_copy("state_deleted", steps=(2, 4))
    with self.assertRaises(RuntimeError) as cm:
      loop.train_and_evaluate(_config(6), wd)
    msg = str(cm.exception)
    self.assertIn(os.path.join(wd, "ckpt"), msg)
    self.assertRegex(msg, r"step 4: KeyError.*step 2: KeyError")
    self.assertIn("fresh --workdir", msg)


@testutil.slow("two LM smoke runs as commands (DamagedCheckpointTest checks "
               "the fallback's line in this process)")
class DamagedCheckpointCommandTest(absltest.TestCase):

  def test_a_half_written_lm_checkpoint_adds_one_line_to_the_output(self):
    # The LM smoke sweep's arrays are stored apart from the metadata, so a
    # cut data file fails some reads while orbax has others under way; it
    # abandons them, and their errors came out later, hundreds of lines.
    wd = os.path.join(_tempdir(self), "run")

    def train(steps):
      return subprocess.run(
          [sys.executable, "launch/train.py", "--config",
           "configs/locater_wt2.py:smoke", f"--config.num_steps={steps}",
           "--workdir", wd], capture_output=True, text=True,
          cwd=testutil.ROOT, timeout=600, check=False)

    self.assertEqual(train(4).returncode, 0)
    data = glob.glob(os.path.join(wd, "ckpt", "4", "state", "ocdbt.process_0",
                                  "d", "*"))
    biggest = max(data, key=os.path.getsize)
    os.truncate(biggest, os.path.getsize(biggest) // 2)
    resumed = train(6)
    out = resumed.stdout + resumed.stderr
    self.assertEqual(resumed.returncode, 0, out[-3000:])
    for noise in ("Exception ignored", "Traceback", "TensorStore"):
      self.assertNotIn(noise, out)
    self.assertLen([l for l in out.splitlines() if "cannot be restored" in l],
                   1)
    self.assertIn("resumed from step 2", out)


_CHILD = r"""
import sys, time
sys.path[:0] = [{tests!r}, {here!r}]
import testutil
testutil.configure_jax()
from qkspec import cli
from qkspec.training import loop, tasks
import reliability_test

real = tasks.make_task
def slow(config, sharding):          # 50 ms per step: time to interrupt
  task = real(config, sharding)
  def batch(step):
    time.sleep(0.05)
    return task.train_batch(step)
  return tasks.Task(**{{**task.__dict__, "train_batch": batch}})
tasks.make_task = slow
with cli.exit_on_interrupt(command="RERUN"):
  loop.train_and_evaluate(reliability_test._config({steps}), {workdir!r})
"""


class InterruptTest(parameterized.TestCase):
  """A training process stopped by a signal saves a checkpoint at a step
  boundary, prints one line, exits with 128 + the signal, and resumes to
  the same state and metrics as a run never stopped."""

  @parameterized.named_parameters(
      ("sigterm", signal.SIGTERM, 143, "stopped by SIGTERM"),
      ("ctrl_c", signal.SIGINT, 130, "interrupted"))
  def test_signal_saves_keeps_metrics_and_resumes_identically(
      self, signum, code, said):
    if signum == signal.SIGINT:     # the same path as SIGTERM
      testutil.skip_unless_slow(self, "Ctrl-C to a training process")
    steps = 40
    tmp = _tempdir(self)
    wd = os.path.join(tmp, "run")
    here = os.path.dirname(os.path.abspath(__file__))
    tests = os.path.dirname(here)
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD.format(tests=tests, here=here,
                                             steps=steps, workdir=wd)],
        cwd=os.path.dirname(tests), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    jsonl = os.path.join(wd, metric_writer.JSONL)
    deadline = time.time() + 120
    while time.time() < deadline and child.poll() is None:
      if os.path.exists(jsonl) and '"step": 2' in open(jsonl).read():
        break
      time.sleep(0.05)
    child.send_signal(signum)
    _, err = child.communicate(timeout=120)
    self.assertEqual(child.returncode, code, err[-3000:])
    self.assertNotIn("Traceback", err)
    self.assertNotIn("has been deleted", err)
    stopped = checkpoint.Checkpointer(wd).latest_step()
    self.assertBetween(stopped, 2, steps - 1)
    last = [l for l in err.strip().splitlines() if l.strip()][-1]
    self.assertEqual(
        last, f"qkspec: {said} at step {stopped}: checkpoint "
        f"{os.path.join(wd, 'ckpt', str(stopped))} saved; to resume, "
        f"rerun: RERUN")
    self.assertEqual(_steps_once(self, testutil.metric_records(wd)),
                     list(range(stopped + 1)))

    straight = loop.train_and_evaluate(_config(steps),
                                       os.path.join(tmp, "straight"))
    with self.assertLogs(level="INFO") as logs:
      resumed = loop.train_and_evaluate(_config(steps), wd)
    self.assertIn(f"resumed from step {stopped}", "\n".join(logs.output))
    testutil.assert_trees_equal(resumed, straight)
    self.assertEqual(testutil.metric_records(wd), testutil.metric_records(
        os.path.join(tmp, "straight")))


class ProgressTest(absltest.TestCase):

  def test_compile_notice_eta_eval_progress_labels_and_outputs(self):
    c = testutil.get_config("theory_task", "smoke")       # 3-member sweep
    c.num_steps, c.log_every = 4, 4
    c.progress_every_s = 0.0
    wd = _tempdir(self)
    with self.assertLogs(level="INFO") as logs:
      loop.train_and_evaluate(c, wd)
    text = "\n".join(logs.output)
    for pattern in (
        r"step 0/4: compiling the train step",
        r"step 1/4: first step done in \dh\d\dm\d\ds",
        r"step 2/4  [\d.e+-]+ steps/s  ETA \dh\d\dm\d\ds",
        r"eval valid: 1/2 batches, \dh\d\dm\d\ds elapsed, ETA",
        r"step 4/4  train/loss kappa1=0,kappa2=0,target=1: [\d.]+; "
        r"kappa1=100,kappa2=1,target=1: [\d.]+; kappa1=100",
        r"step 4 eval: valid/loss kappa1=0,kappa2=0,target=1: [\d.]+;",
        rf"checkpoints: {wd}/ckpt \(steps 2, 4\)",
        rf"plot: python launch/plot_training.py --workdir {wd}"):
      self.assertRegex(text, pattern)
    self.assertNotRegex(text, r"step 4/4  [\d.e+-]+ steps/s")   # log step


if __name__ == "__main__":
  absltest.main()
