"""Tests for qkspec.training.pallas_common: where the Pallas kernels run,
and their blocks."""
from unittest import mock

from absl.testing import absltest

from qkspec.training import pallas_common


class InterpretModeTest(absltest.TestCase):

  def _mode(self, platform, interpret=None):
    with mock.patch.object(pallas_common.jax, "default_backend",
                           lambda: platform):
      return pallas_common.interpret_mode(interpret, "K's kernels", "OTHER")

  def test_interpreter_on_a_cpu_only_unless_asked(self):
    self.assertTrue(self._mode("cpu"))
    self.assertFalse(self._mode("gpu"))
    self.assertTrue(self._mode("gpu", interpret=True))
    self.assertTrue(self._mode("tpu", interpret=True))

  def test_compiled_on_a_tpu_names_the_option_to_use(self):
    with self.assertRaisesRegex(NotImplementedError,
                                "K's kernels are written for Triton.*OTHER"):
      self._mode("tpu")


class FittingBlockTest(absltest.TestCase):

  def test_the_block_is_at_most_most_and_divides_n(self):
    self.assertEqual(pallas_common.fitting_block(256, 64, "X needs n"), 64)
    self.assertEqual(pallas_common.fitting_block(8, 64, "X needs n"), 8)
    with self.assertRaisesRegex(ValueError,
                                "X needs n to be a multiple of 64 .* got 96"):
      pallas_common.fitting_block(96, 64, "X needs n")


if __name__ == "__main__":
  absltest.main()
