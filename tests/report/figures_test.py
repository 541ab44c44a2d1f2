"""Tests for qkspec.report.figures: the kappa2 figure's paired row."""
from unittest import mock

from absl.testing import absltest
import numpy as np

from qkspec.report import figures
from qkspec.report import locater_minimum
from qkspec.report import stats
import report_fixtures


def _rows(seeds):
  """kappa2 = 0, 0.1, 1 with per-seed ppl offsets that the pairing removes
  and the group spread does not."""
  return [report_fixtures.seed_row(k, {"valid_ppl": [0.5 * k + 0.05 * i
                                                     for i in range(
                                                         len(seeds))]},
                                   seeds=list(seeds))
          for k in (0.0, 0.1, 1.0)]


class Kappa2FigureTest(absltest.TestCase):

  def _figure(self, rows):
    with mock.patch.object(locater_minimum, "star_curve",
                           return_value=([], [])):
      return figures.kappa2_figure(rows, "Fig. 6")

  def test_paired_differences_with_their_95_percent_intervals(self):
    rows = _rows([0, 1, 2, 3])
    fig = self._figure(rows)
    ppl = fig.axes[5]                       # bottom row, D
    [bars] = ppl.containers
    line, _, (segments,) = bars
    d = np.array(rows[2]["valid_ppl_values"]) - rows[0]["valid_ppl_values"]
    test = stats.paired_test(d)
    np.testing.assert_allclose(float(line.get_ydata()[-1]), test["mean"])
    np.testing.assert_allclose(segments.get_segments()[-1][:, 1], test["ci"])
    # the seeds' offsets (2.4 ppl a seed) would swamp the unpaired spread
    self.assertGreater(rows[2]["valid_ppl_std"],
                       test["ci"][1] - test["ci"][0])
    self.assertStartsWith(ppl.get_title(), "D: minus $\\kappa_2 = 0$ (95% CI)")

  def test_one_seed_draws_the_difference_without_an_interval(self):
    rows = _rows([0])
    fig = self._figure(rows)
    [bars] = fig.axes[5].containers
    line, _, (segments,) = bars
    np.testing.assert_allclose(np.asarray(line.get_ydata(), float), [0.05, 0.5])
    for seg in segments.get_segments():
      self.assertEqual(seg[0, 1], seg[1, 1])
    self.assertIn("one seed: no intervals", fig._suptitle.get_text())
    for ax in fig.axes[3:]:                 # no panel claims an interval
      self.assertIn("(one seed)", ax.get_title())
      self.assertNotIn("CI", ax.get_title())


if __name__ == "__main__":
  absltest.main()
