"""The README's main job (launch/demo.py) on tiny configs."""
import pathlib
import tempfile

from absl.testing import absltest

from qkspec.experiments import demo
import testutil


class DemoTest(absltest.TestCase):

  def test_runs_and_lists_figures(self):
    with tempfile.TemporaryDirectory() as tmp:
      figures = demo.run(tmp, testutil.ROOT / "configs", smoke=True,
                         only=("entropy_bound",))
      self.assertEqual(list(figures), ["entropy_bound"])
      self.assertTrue(figures["entropy_bound"])
      for path in figures["entropy_bound"]:
        self.assertTrue(pathlib.Path(path).is_file())
      self.assertTrue((pathlib.Path(tmp) / "entropy_bound"
                       / "config.json").is_file())

  def test_unknown_experiment(self):
    with self.assertRaisesRegex(ValueError, "unknown experiments"):
      demo.run("/tmp/unused", testutil.ROOT / "configs", only=("fig99",))


if __name__ == "__main__":
  absltest.main()
