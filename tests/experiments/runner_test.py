"""Tests for qkspec.experiments.runner: what launch/run.py runs."""
import ast
import importlib
import pathlib
import tempfile

from absl.testing import absltest
import ml_collections

from qkspec.config import ConfigError
from qkspec.experiments import EXPERIMENTS
from qkspec.experiments import runner
import testutil

TRAINING = ("theory_task", "locater_wt2", "rho_training", "depth_width")


class RunnerTest(absltest.TestCase):

  def test_experiments_are_the_configs_experiments_and_each_has_run(self):
    named = {testutil.get_config(p.stem, "smoke").get("experiment")
             for p in (testutil.ROOT / "configs").glob("*.py")
             if p.stem != "__init__"} - {None}
    self.assertCountEqual(EXPERIMENTS, named)
    for name in EXPERIMENTS:
      module = importlib.import_module(f"qkspec.experiments.{name}")
      self.assertTrue(callable(module.run), name)

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
      runner.check(config)

  def test_every_config_docstring_says_how_to_launch_it(self):
    for name in EXPERIMENTS + TRAINING:
      path = testutil.ROOT / "configs" / f"{name}.py"
      doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
      script = "run" if name in EXPERIMENTS else "train"
      self.assertIn(f"python launch/{script}.py --config configs/{name}.py",
                    doc, name)
      self.assertLessEqual(len(doc.splitlines()), 30, name)

  def test_bad_experiment_names_raise(self):
    for bad in ("simulate", "demo", "runner", "_private", "outputs", 3):
      config = ml_collections.ConfigDict({"experiment": bad})
      with self.assertRaisesRegex(ConfigError, "config.experiment must be "
                                  "one of .*simulate_rho"):
        runner.run(config, "/nonexistent/never/written")
    with self.assertRaisesRegex(ConfigError, "names no experiment"):
      runner.run(ml_collections.ConfigDict({"seed": 0}),
                 "/nonexistent/never/written")

  def test_run_dispatches_to_the_named_experiment(self):
    config = testutil.get_config("entropy_bound", "smoke")
    with tempfile.TemporaryDirectory() as tmp:
      out = runner.run(config, tmp)
      self.assertIsNotNone(out)
      self.assertTrue((pathlib.Path(tmp) / "config.json").exists())
      self.assertTrue(list(pathlib.Path(tmp).glob("*.png")))


if __name__ == "__main__":
  absltest.main()
