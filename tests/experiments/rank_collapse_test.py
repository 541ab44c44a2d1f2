"""Tests for qkspec.experiments.rank_collapse: fits, the smoke run's tables."""
import tempfile

from absl.testing import absltest
import numpy as np

from qkspec.experiments import measures
from qkspec.experiments import rank_collapse
import testutil


class FitTest(absltest.TestCase):

  def test_fit_helpers(self):
    r = [0.5]
    for _ in range(4):
      r.append(2.0 * r[-1]**3)
    order, a, _ = rank_collapse.convergence_order(np.array(r), 1e-300, 0.9)
    self.assertAlmostEqual(order, 3.0, places=6)
    self.assertAlmostEqual(a, np.log(2.0), places=6)
    self.assertGreater(rank_collapse.closed_form_fits(np.array(r), 1e-300)
                       ["dong_r2"], 0.999999)
    order, _, _ = rank_collapse.convergence_order(0.9**np.arange(10.0), 1e-9,
                                                  1.0)
    self.assertAlmostEqual(order, 1.0, places=6)
    self.assertEqual(measures.collapse_depth(np.array([1, 0.1, 1e-4]), 1e-3),
                     2)


class SmokeRunTest(absltest.TestCase):

  def test_rank_collapse_smoke(self):
    config = testutil.get_config("rank_collapse", "smoke")
    config.architectures = ("san", "san_skip")   # the others: san_test
    config.methods = ("mean",)        # svd/composite: diagnostics_test
    with tempfile.TemporaryDirectory() as workdir:
      out = rank_collapse.run(config, workdir)
      names = {p.name for p in out["paths"]}
    self.assertContainsSubset({"fig_rank_collapse.png", "fig_paths.png",
                               "collapse_fits.csv", "config.json"}, names)
    self.assertContainsSubset({"order", "order_seed_mean", "order_seed_std",
                               "order_pairs", "order_intercept"},
                              out["collapse_fits"][0])
    self.assertNotIn("kappa", out["collapse_fits"][0])
    # temperature None is lambda = sqrt(head_dim), given explicitly.
    config.temperature = float(np.sqrt(config.head_dim))
    explicit = rank_collapse.run_measure(config)
    np.testing.assert_array_equal(explicit["rel/san/mean"],
                                  out["raw"]["rel/san/mean"])
    # the cubic bound from the table's numbers: each step's bound is its
    # contraction times the previous layer's residual, and `holds` is
    # residual <= bound (or the residual at the float floor)
    rows = out["cubic_bound"]
    self.assertNotEmpty(rows)
    for prev, row in zip(rows, rows[1:]):
      if row["layer"] > 1:
        self.assertEqual((prev["seed"], prev["sequence"], prev["layer"]),
                         (row["seed"], row["sequence"], row["layer"] - 1))
        np.testing.assert_allclose(
            row["one_step_bound"], row["contraction"] * prev["residual"],
            rtol=1e-5, err_msg=str(row))
    for row in rows:
      holds = (row["residual"] <= row["one_step_bound"] * (1 + 1e-9)
               or row["at_float_floor"])
      self.assertEqual(row["holds"], holds, row)
      self.assertTrue(holds, row)
    self.assertTrue(any(r["residual"] <= r["one_step_bound"]
                        and not r["at_float_floor"] for r in rows))
    np.testing.assert_allclose(sum(r["path_fraction"]
                                   for r in out["path_lengths"]), 1.0)


if __name__ == "__main__":
  absltest.main()
