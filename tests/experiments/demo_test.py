"""Tests for qkspec.experiments.demo: README's main job on tiny configs."""
import pathlib
import tempfile

from absl.testing import absltest

from qkspec.config import ConfigError
from qkspec.experiments import EXPERIMENTS
from qkspec.experiments import demo
import testutil


class DemoTest(absltest.TestCase):

  @testutil.slow("demo's two experiments run again; quick: both through "
                 "experiments.runner.run, what demo calls for each "
                 "(runner_test.py test_run_dispatches_to_the_named_experiment,"
                 " loop_test.py test_a_launch_validates_its_config_before_"
                 "processes_start_and_once_more)")
  def test_runs_and_lists_figures(self):
    with tempfile.TemporaryDirectory() as tmp:
      # One experiment config and the training config, as the demo runs
      # them (both through experiments.runner).
      figures = demo.run(tmp, testutil.ROOT / "configs", smoke=True,
                         only=("entropy_bound", "theory_task"))
      self.assertEqual(list(figures), ["entropy_bound", "theory_task"])
      for name in figures:
        self.assertTrue(figures[name], name)
        for path in figures[name]:
          self.assertTrue(pathlib.Path(path).is_file())
      self.assertTrue((pathlib.Path(tmp) / "theory_task"
                       / "members.json").is_file())
      self.assertTrue((pathlib.Path(tmp) / "entropy_bound"
                       / "config.json").is_file())

  def test_the_rest_needs_no_data_either_and_runs_with_launch_run(self):
    self.assertCountEqual(demo.DEMO[:3] + demo.OTHERS, EXPERIMENTS)
    with self.assertRaisesRegex(
        ConfigError, r"^--only=simulate_grid,fig99: the demo runs theory_rho,"
        r" entropy_bound, simulate_rho, theory_task, not simulate_grid, "
        r"fig99; run simulate_grid with python launch/run.py --config "
        r"configs/simulate_grid.py --workdir DIR.$"):
      demo.run("/tmp/unused", testutil.ROOT / "configs",
               only=("simulate_grid", "fig99"))
    with self.assertRaisesRegex(ConfigError, "not fig99.$"):
      demo.check(("theory_rho", "fig99"))


if __name__ == "__main__":
  absltest.main()
