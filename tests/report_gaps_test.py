"""Tests for qkspec.experiments.report_gaps (differences over training)."""
from absl.testing import absltest
import numpy as np

from qkspec.experiments import report_gaps
from qkspec.experiments import report_stats


def _member(kappa1, kappa2, ppl, entropy=2.8, steps=(0, 10, 20)):
  return dict(kappa1=kappa1, kappa2=kappa2, target=1.0, seed=0,
              metrics={"valid/ppl": (list(steps), list(ppl)),
                       "mean/entropy": (list(steps), [entropy] * len(steps))})


class GapTest(absltest.TestCase):

  def test_differences_at_common_steps(self):
    steps, d = report_stats.step_differences(
        _member(100.0, 0.0, [300.0, 250.0, 240.0])["metrics"]["valid/ppl"],
        _member(100.0, 1.0, [301.0, 245.0], steps=(10, 30))["metrics"][
            "valid/ppl"])
    np.testing.assert_array_equal(steps, [10])
    np.testing.assert_allclose(d, [51.0])

  def test_one_line_per_member_on_a_band_of_the_minimal_effect(self):
    fig = report_gaps.gap_figure(
        [_member(100.0, 0.0, [300.0, 250.0, 240.0]),
         _member(100.0, 1.0, [300.0, 250.2, 240.1]),
         _member(0.0, 0.0, [290.0, 235.0, 230.0], entropy=2.5)], "t")
    for ax, band in zip(fig.axes[:2], (0.01, 0.24)):
      self.assertEqual(ax.get_yscale(), "symlog")
      self.assertLen(ax.get_lines(), 3)            # zero line + 2 members
      self.assertAlmostEqual(ax.patches[0].get_y() + 0, -band)
    np.testing.assert_allclose(fig.axes[1].get_lines()[2].get_ydata(),
                               [-10.0, -15.0, -10.0])

  def test_no_figure_without_the_kappa2_zero_member(self):
    self.assertIsNone(report_gaps.gap_figure(
        [_member(100.0, 1.0, [1.0, 1.0, 1.0])], "t"))


if __name__ == "__main__":
  absltest.main()
