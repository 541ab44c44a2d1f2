"""Tests for qkspec.experiments.entropy_bound: Fig. 4's smoke run and its
intervals."""
import math

from absl.testing import absltest
import numpy as np

from qkspec.theory import diagnostics
from qkspec.experiments import entropy_bound
import testutil


class EntropyBoundTest(absltest.TestCase):

  def test_smoke_run_and_bound_exceeds_ln_t_at_zero(self):
    workdir = testutil.workdir(self)
    result = entropy_bound.run(
        testutil.get_config("entropy_bound", "smoke"), workdir)
    testutil.assert_files(self, workdir, [
        "config.json", "fig4_entropy_bound.png", "entropy_bound.csv",
        "entropy_bound_summary.json"])
    for row in result["summary"]:
      t = row["seq_len"]
      np.testing.assert_allclose(row["bound_at_nu0"], math.log1p(t),
                                 rtol=1e-6)
      self.assertGreater(row["bound_at_nu0"], math.log(t))
      self.assertTrue(row["bound_exceeds_ln_T_on"].startswith("[0,"), row)
    bound = result["bound"]
    np.testing.assert_allclose(
        bound[1], diagnostics.eq9_entropy(result["nu"], 256),
        rtol=1e-6)

  def test_exceed_intervals(self):
    nu = np.arange(6.0)
    self.assertEqual(entropy_bound.exceed_intervals(
        nu, np.array([1, 1, 0, 0, 1, 1], bool)), [(0.0, 1.0), (4.0, 5.0)])
    self.assertEqual(entropy_bound.exceed_intervals(nu, nu < 0), [])


if __name__ == "__main__":
  absltest.main()
