"""Tests for qkspec.config.usage: one line per --config mistake, --help's
list of configs."""
import os

from absl.testing import absltest

from qkspec.config import usage
import testutil

_THEORY = str(testutil.ROOT / "configs" / "theory_task.py")


class UsageTest(absltest.TestCase):

  def test_an_unknown_field_names_the_closest_one(self):
    config = testutil.get_config("theory_task", "smoke")
    self.assertIsNone(usage.unknown_field(config, "locater.kappa1"))
    self.assertEqual(usage.unknown_field(config, "locatr.kappa1.x"),
                     "--config.locatr.kappa1.x: the config has no field "
                     "'locatr.kappa1.x'; did you mean "
                     "--config.locater.kappa1.x?")
    self.assertEqual(usage.unknown_field(config, "zzz"),
                     "--config.zzz: the config has no field 'zzz'")
    self.assertEqual(
        usage.first_unknown_field(f"{_THEORY}:smoke",
                                  ["num_steps", "model.d_modl"]),
        "--config.model.d_modl: the config has no field 'model.d_modl'; "
        "did you mean --config.model.d_model?")
    self.assertIsNone(usage.first_unknown_field("/no/such.py", ["x"]))

  def test_a_missing_file_names_where_it_was_looked_for(self):
    self.assertEqual(usage.load_error("configs/nope.py:smoke", OSError()),
                     "--config=configs/nope.py:smoke: no such file "
                     f"'configs/nope.py' (looked for "
                     f"{os.path.abspath('configs/nope.py')})")
    error = OSError("cannot load")
    error.__cause__ = SyntaxError("bad\n  line")
    self.assertEqual(usage.load_error(_THEORY, error),
                     f"--config={_THEORY}: cannot load {_THEORY!r}: bad; "
                     "line")

  def test_help_lists_each_config_with_its_arguments(self):
    root = testutil.ROOT / "configs"
    every = usage.config_lines(root, training_only=False)
    training = usage.config_lines(root, training_only=True)
    names = sorted(p.name for p in root.glob("*.py") if p.stem != "__init__")
    self.assertEqual([l.split()[0] for l in every[::2]], names)
    self.assertEqual([l.split()[0] for l in training[::2]],
                     ["depth_width.py", "locater_wt2.py", "rho_training.py",
                      "theory_task.py"])
    wt2 = every[every.index(next(l for l in every
                                 if l.startswith("  locater_wt2.py"))) + 1]
    self.assertEqual(wt2.split(), [":smoke", "fairseq", "seeds=1", "contrast",
                                   "seed=0", "none", "both_readings",
                                   "kappa2=0,0.001,0.01,0.1,1"])
    self.assertIn("paper Fig. 6", every[every.index(
        next(l for l in every if l.startswith("  locater_wt2.py")))])


if __name__ == "__main__":
  absltest.main()
