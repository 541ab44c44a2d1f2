"""Tests for qkspec.report.figures: the kappa2 figure's paired row, the
members averaged over seeds and the gaps to kappa2 = 0."""
from absl.testing import absltest
import numpy as np

from qkspec.report import figures
from qkspec.report import stats
import report_fixtures


def _rows(seeds):
  """kappa2 = 0, 0.1, 1 with per-seed ppl offsets that the pairing removes
  and the group spread does not."""
  return [report_fixtures.seed_group(k, {"valid_ppl": [0.5 * k + 0.05 * i
                                                       for i in range(
                                                           len(seeds))]},
                                     seeds=list(seeds))
          for k in (0.0, 0.1, 1.0)]


class Kappa2FigureTest(absltest.TestCase):

  def _figure(self, rows):
    return figures.kappa2_figure(rows, "Fig. 6")

  def test_paired_differences_with_their_95_percent_intervals(self):
    rows = _rows([0, 1, 2, 3])
    fig = self._figure(rows)
    ppl = fig.axes[5]                       # bottom row, D
    [bars] = ppl.containers
    line, _, (segments,) = bars
    d = (np.array(rows[2].values["valid_ppl"])
         - np.array(rows[0].values["valid_ppl"]))
    test = stats.paired_test(d)
    np.testing.assert_allclose(float(line.get_ydata()[-1]), test["mean"])
    np.testing.assert_allclose(segments.get_segments()[-1][:, 1], test["ci"])
    # the seeds' offsets (2.4 ppl a seed) would swamp the unpaired spread
    self.assertGreater(rows[2].std["valid_ppl"],
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


def _member(seed, kappa2, steps, values, key="mean/entropy"):
  return dict(seed=seed, kappa1=100.0, kappa2=kappa2, target=1.0,
              metrics={key: (np.asarray(steps), np.asarray(values, float))})


class SeedMeanTest(absltest.TestCase):

  def test_seeds_average_at_common_steps_and_kappa2_stays_apart(self):
    members = [_member(0, 0.0, [0, 10, 20], [1.0, 2.0, 3.0]),
               _member(1, 0.0, [0, 10], [3.0, 4.0]),       # stopped early
               _member(0, 1.0, [0, 10], [5.0, 6.0])]
    merged = {m["kappa2"]: m for m in figures.seed_mean(members)}
    self.assertEqual(sorted(merged), [0.0, 1.0])
    steps, vals = merged[0.0]["metrics"]["mean/entropy"]
    np.testing.assert_array_equal(steps, [0, 10])
    np.testing.assert_allclose(vals, [2.0, 3.0])
    self.assertEqual((merged[0.0]["n_seeds"], merged[1.0]["n_seeds"]), (2, 1))
    np.testing.assert_allclose(merged[1.0]["metrics"]["mean/entropy"][1],
                               [5.0, 6.0])

  def test_misaligned_steps_are_not_averaged(self):
    members = [_member(0, 0.0, [0, 10], [1.0, 2.0]),
               _member(1, 0.0, [0, 20], [3.0, 4.0])]
    self.assertEqual(figures.seed_mean(members)[0]["metrics"], {})


class GapTest(absltest.TestCase):

  def test_one_line_per_member_on_a_band_of_the_minimal_effect(self):
    fig = figures.gap_figure(
        [report_fixtures.gap_member(100.0, 0.0, [300.0, 250.0, 240.0]),
         report_fixtures.gap_member(100.0, 1.0, [300.0, 250.2, 240.1]),
         report_fixtures.gap_member(0.0, 0.0, [290.0, 235.0, 230.0],
                                    entropy=2.5)], "t")
    for ax, band in zip(fig.axes[:2], (0.01, 0.24)):
      self.assertEqual(ax.get_yscale(), "symlog")
      self.assertLen(ax.get_lines(), 3)            # zero line + 2 members
      self.assertAlmostEqual(ax.patches[0].get_y() + 0, -band)
    np.testing.assert_allclose(fig.axes[1].get_lines()[2].get_ydata(),
                               [-10.0, -15.0, -10.0])

  def test_no_figure_without_the_kappa2_zero_member(self):
    self.assertIsNone(figures.gap_figure(
        [report_fixtures.gap_member(100.0, 1.0, [1.0, 1.0, 1.0])], "t"))


class ReadingLinesTest(absltest.TestCase):

  def test_a_reading_with_its_no_locater_member_alone_draws_no_line(self):
    rows = [report_fixtures.seed_group(0.0, {"scale": 43.0 - 0.27},
                                       kappa1=0.0),
            report_fixtures.seed_group(0.0, {"scale": 0.054 - 0.27},
                                       reading="summed_loss"),
            report_fixtures.seed_group(1.0, {"scale": 0.057 - 0.27},
                                       reading="summed_loss")]
    fig = figures.kappa2_figure(rows, "Fig. 6")
    labels = [ax.get_legend_handles_labels()[1] for ax in fig.axes]
    # the no-LocATER member as a line in B (on a log axis), C and D
    self.assertEqual(labels[0], ["1: fairseq (summed_loss)",
                                 "no LocATER (43)"])
    self.assertEqual(fig.axes[0].get_yscale(), "log")
    self.assertCountEqual(labels[1], ["1: fairseq (summed_loss)",
                                      "no LocATER (2.8)"])
    self.assertIn("no LocATER (240)", labels[2])


if __name__ == "__main__":
  absltest.main()
