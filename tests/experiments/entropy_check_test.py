"""Tests for qkspec.experiments.entropy_check: the smoke run's summary."""
import tempfile

from absl.testing import absltest
import numpy as np

from qkspec.experiments import entropy_check
from qkspec.experiments import measures
import testutil


class SmokeRunTest(absltest.TestCase):

  @testutil.slow("the experiment's smoke run")
  def test_entropy_check_smoke(self):
    config = testutil.get_config("entropy_check", "smoke")
    with tempfile.TemporaryDirectory() as workdir:
      out = entropy_check.run(config, workdir)
    # the summary's fractions from the per-setting table (equal-sized
    # settings: the mean of their fractions), and no row of any setting
    # below a Zhai bound: its least slack >= -measures.BOUND_TOL
    zhai = [r for r in out["summary"] if r["bound"].startswith("zhai")]
    self.assertTrue(zhai)
    for row in zhai:
      per_setting = [s for s in out["settings"] if s["inputs"] == row["inputs"]]
      np.testing.assert_allclose(
          row["rows_below_fraction"],
          np.mean([s[f"rows_below_{row['bound']}"] for s in per_setting]),
          atol=1e-7, err_msg=str(row))
      for s in per_setting:
        self.assertGreaterEqual(s[f"min_slack_{row['bound']}"],
                                -measures.BOUND_TOL, (row["bound"], s))
      self.assertEqual(row["rows_below_fraction"], 0.0, row)
    self.assertContainsSubset({"eigen_mean", "eigen_std"}, out["settings"][0])
    # temperature None is lambda = sqrt(d), given explicitly.
    config.temperature = float(np.sqrt(config.dim))
    explicit = entropy_check.sweep_from_config(config)
    for kind in config.inputs:
      for name in ("nu", "entropy_mean", "below_eq9", "below_zhai"):
        np.testing.assert_array_equal(explicit[kind][name],
                                      out["raw"][kind][name])


if __name__ == "__main__":
  absltest.main()
