"""Tests for qkspec.experiments.spectrum_collapse: the smoke run."""
import tempfile

from absl.testing import absltest

from qkspec.experiments import spectrum_collapse
import testutil


class SmokeRunTest(absltest.TestCase):

  @testutil.slow("the experiment's smoke run")
  def test_spectrum_collapse_smoke(self):
    config = testutil.get_config("spectrum_collapse", "smoke")
    stds = config.eigen_stds
    with tempfile.TemporaryDirectory() as workdir:
      out = spectrum_collapse.run(config, workdir)
      names = {p.name for p in out["paths"]}
    self.assertContainsSubset({"fig_spectrum_collapse.png",
                               "spectrum_claims.csv"}, names)
    self.assertLen(out["grid"], 4)
    self.assertEqual(sorted({r["eigen_std"] for r in out["grid"]}),
                     sorted(stds))
    self.assertEqual(max(r["zhai_violation_all"] for r in out["grid"]), 0.0)


if __name__ == "__main__":
  absltest.main()
