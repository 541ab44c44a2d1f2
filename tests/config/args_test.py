"""Tests for qkspec.config.args: the `--config file.py:ARG` grammar."""
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from qkspec.config import ConfigError
from qkspec.config import args
import testutil


class ParseArgTest(parameterized.TestCase):

  def test_bare_names_set_bools_and_values_take_the_defaults_type(self):
    got = args.parse_arg(" smoke , L=3,d=32,lr=0.5,fairseq=false ",
                         smoke=False, L=1, d=128, lr=1.0, fairseq=True,
                         seeds=1)
    self.assertEqual(got.to_dict(), dict(smoke=True, L=3, d=32, lr=0.5,
                                         fairseq=False, seeds=1))
    self.assertIsInstance(got.L, int)
    self.assertIsInstance(got.lr, float)

  @parameterized.parameters(None, "", ",")
  def test_no_argument_gives_the_defaults(self, arg):
    self.assertEqual(args.parse_arg(arg, smoke=False, L=1).to_dict(),
                     dict(smoke=False, L=1))

  @parameterized.parameters(
      ("smok", "unknown config argument 'smok'; known: \\['L', 'smoke'\\]"),
      ("L", "'L' needs a value \\(L=...\\)"))
  def test_bad_arguments_are_named(self, arg, message):
    with self.assertRaisesRegex(ConfigError, message):
      args.parse_arg(arg, smoke=False, L=1)

  def test_a_tuple_takes_every_value_up_to_the_next_name(self):
    defaults = dict(kappa2=(0.0, 1.0), both=False, seeds=1)
    got = args.parse_arg("kappa2=10,100,1000,both,seeds=3", **defaults)
    self.assertEqual(got.to_dict(), dict(kappa2=(10.0, 100.0, 1000.0),
                                         both=True, seeds=3))
    self.assertIsInstance(got.kappa2[0], float)
    self.assertEqual(args.parse_arg("seeds=2,kappa2=5", **defaults).kappa2,
                     (5.0,))
    self.assertEqual(args.parse_arg("", **defaults).kappa2, (0.0, 1.0))
    with self.assertRaisesRegex(ValueError, "'kappa2' takes float values, "
                                "got 'smoke'"):
      args.parse_arg("kappa2=1,smoke", **defaults)
    with self.assertRaisesRegex(ValueError, "unknown config argument '10'"):
      args.parse_arg("seeds=2,10", **defaults)   # no tuple open

  def test_a_value_of_the_wrong_type_is_refused(self):
    with self.assertRaisesRegex(ConfigError,
                                "'L' takes values like 1, got 'three'"):
      args.parse_arg("L=three", L=1)


class LoadConfigFileTest(absltest.TestCase):

  def test_loads_a_config_with_its_argument(self):
    config = args.load_config_file(
        testutil.ROOT / "configs" / "theory_task.py", "smoke")
    self.assertEqual(config.task, "theory")
    self.assertEqual(config.num_steps, 4)         # defaults.smoke

  def test_get_config_receives_the_argument(self):
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, "echo.py")
      with open(path, "w") as f:
        f.write("def get_config(arg):\n  return {'arg': arg}\n")
      self.assertEqual(args.load_config_file(path, "a,b=1"),
                       {"arg": "a,b=1"})
      self.assertEqual(args.load_config_file(path), {"arg": None})

  def test_a_missing_file_is_named(self):
    with self.assertRaisesRegex(ConfigError, "no config file at .*nope.py"):
      args.load_config_file("/nonexistent/nope.py")

  def test_arguments_are_parse_args_defaults(self):
    self.assertEqual(
        args.arguments(testutil.ROOT / "configs" / "depth_width.py"),
        dict(L=1, d=128, smoke=False, fairseq=False, seeds=1, contrast=False,
             seed=0, none=False, both_readings=False,
             kappa2=(0.0, 1e-3, 1e-2, 1e-1, 1.0)))
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, "plain.py")
      with open(path, "w") as f:
        f.write("def get_config(arg=None):\n  return {}\n")
      self.assertEqual(args.arguments(path), {})


if __name__ == "__main__":
  absltest.main()
