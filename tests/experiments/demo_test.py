"""The README's main job (launch/demo.py) on tiny configs."""
import pathlib
import subprocess
import sys
import tempfile

from absl.testing import absltest

from qkspec import cli
import testutil


class DemoTest(absltest.TestCase):

  @testutil.slow("demo's two experiments run again; quick: both through "
                 "cli.run_experiment, what demo calls for each "
                 "(cli_test.py test_run_dispatches_to_the_named_experiment, "
                 "loop_test.py test_a_launch_validates_its_config_once)")
  def test_runs_and_lists_figures(self):
    with tempfile.TemporaryDirectory() as tmp:
      # One experiment config and the training config, as the demo runs
      # them (both through cli.run_experiment).
      figures = cli.demo(tmp, testutil.ROOT / "configs", smoke=True,
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

  def test_unknown_experiment(self):
    with self.assertRaisesRegex(ValueError, "unknown experiments"):
      cli.demo("/tmp/unused", testutil.ROOT / "configs", only=("fig99",))

  def test_the_command_names_the_experiments_in_one_line(self):
    r = subprocess.run([sys.executable, "launch/demo.py", "--only=fig99",
                        "--workdir", "/nonexistent/never"],
                       cwd=testutil.ROOT, capture_output=True, text=True,
                       check=False)
    self.assertNotEqual(r.returncode, 0)
    self.assertNotIn("Traceback", r.stderr)
    self.assertIn("--only takes experiments of " + ", ".join(cli.DEMO),
                  r.stderr)


if __name__ == "__main__":
  absltest.main()
