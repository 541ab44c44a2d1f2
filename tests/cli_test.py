"""The two entry points: launch/run.py (experiments) and the old aliases."""
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest
import ml_collections

from qkspec.experiments import cli
import testutil

EXPERIMENTS = ("entropy_bound", "entropy_check", "rank_collapse",
               "simulate_grid", "simulate_rho", "spectrum_collapse",
               "theory_rho")
TRAINING = ("theory_task", "locater_wt2", "rho_training", "depth_width")


class RunnerTest(absltest.TestCase):

  def test_experiments_are_the_modules_with_run(self):
    self.assertEqual(cli.experiments(), EXPERIMENTS)

  def test_every_config_names_its_own_experiment_or_is_a_training_config(self):
    stems = sorted(p.stem for p in (testutil.ROOT / "configs").glob("*.py")
                   if p.stem != "__init__")
    self.assertCountEqual(stems, EXPERIMENTS + TRAINING)
    for name in EXPERIMENTS:
      self.assertEqual(testutil.get_config(name, "smoke").experiment, name)
    for name in TRAINING:
      config = testutil.get_config(name, "smoke")
      self.assertNotIn("experiment", config)
      self.assertIn(config.task, ("theory", "lm"))

  def test_bad_experiment_names_raise(self):
    for bad in ("simulate", "demo", "_moved", "outputs", "inputs", 3):
      config = ml_collections.ConfigDict({"experiment": bad})
      with self.assertRaisesRegex(ValueError, "config.experiment must be one "
                                  "of .*simulate_rho"):
        cli.run_experiment(config, "/nonexistent/never/written")
    with self.assertRaisesRegex(ValueError, "names no experiment"):
      cli.run_experiment(ml_collections.ConfigDict({"seed": 0}),
                         "/nonexistent/never/written")

  def test_run_dispatches_to_the_named_experiment(self):
    config = testutil.get_config("entropy_bound", "smoke")
    with tempfile.TemporaryDirectory() as tmp:
      out = cli.run_experiment(config, tmp)
      self.assertIsNotNone(out)
      self.assertTrue((pathlib.Path(tmp) / "config.json").exists())
      self.assertTrue(list(pathlib.Path(tmp).glob("*.png")))


class LaunchTest(absltest.TestCase):

  def _launch(self, script, config, workdir):
    return subprocess.run(
        [sys.executable, str(testutil.ROOT / "launch" / script), "--config",
         str(testutil.ROOT / "configs" / config), "--workdir", workdir],
        capture_output=True, text=True, cwd=testutil.ROOT, timeout=600)

  def test_run_and_an_old_alias_write_the_same_tables(self):
    with tempfile.TemporaryDirectory() as tmp:
      new = self._launch("run.py", "entropy_bound.py:smoke", f"{tmp}/new")
      self.assertEqual(new.returncode, 0, new.stderr[-2000:])
      old = self._launch("entropy_bound.py", "entropy_bound.py:smoke",
                         f"{tmp}/old")
      self.assertEqual(old.returncode, 0, old.stderr[-2000:])
      self.assertIn("old name of launch/run.py", old.stderr)
      for name in ("entropy_bound.csv", "entropy_bound_summary.csv"):
        self.assertEqual((pathlib.Path(tmp) / "new" / name).read_text(),
                         (pathlib.Path(tmp) / "old" / name).read_text())

  def test_every_old_script_is_an_alias_of_run(self):
    old = {"theory": "theory_rho", "simulate": "simulate_rho",
           "simulate_grid": "simulate_grid", "entropy_bound": "entropy_bound",
           "collapse": "rank_collapse",
           "spectrum_collapse": "spectrum_collapse",
           "entropy_check": "entropy_check"}
    for script, experiment in old.items():
      text = (testutil.ROOT / "launch" / f"{script}.py").read_text()
      self.assertIn(f'default="{experiment}"', text)
      self.assertIn('alias_of="launch/run.py"', text)


if __name__ == "__main__":
  absltest.main()
