"""Tests for qkspec.report.verdicts: verdicts from planted seeds."""
from absl.testing import absltest
import numpy as np

from qkspec.report import floors
from qkspec.report import stats as rs
from qkspec.report import verdicts as rv
import report_fixtures


def _verdict(vs, claim, kind="kappa2", label="Fig. 6"):
  [v] = [v for v in vs if (v["claim"], v["kind"], v["label"])
         == (claim, kind, label)]
  return v


def _d_with_t(t, n, mean):
  z = np.linspace(-1, 1, n)
  return mean + z / z.std(ddof=1) * mean * np.sqrt(n) / t


class FigureOrderTest(absltest.TestCase):

  def test_verdicts_list_fig6_before_fig10(self):
    rows = []
    for fig in ("10", "6"):
      for r in (report_fixtures.summary_row(0.0, 5.0, 1.0, 200.0),
                report_fixtures.summary_row(1.0, 3.0, 2.0, 150.0)):
        rows.append(dict(r, figure=fig, label=f"Fig. {fig}"))
    vs = rv.verdicts(rows)
    self.assertEqual([v["label"] for v in vs],
                     ["Fig. 6"] * 3 + ["Fig. 10"] * 3)


class PairedVerdictTest(absltest.TestCase):

  def _d(self, d, seeds=(0, 1, 2)):
    return rv.verdicts([report_fixtures.seed_row(0.0, {}, seeds=list(seeds)),
                        report_fixtures.seed_row(1.0, {"valid_ppl": d},
                                                 seeds=list(seeds))])

  def test_t_of_three_seeds_is_held_to_4_30(self):
    """t = 3.0 passed 2 x SE; it is not significant at n - 1 = 2 dof."""
    v = _verdict(self._d(_d_with_t(3.0, 3, 1.0)), "D")
    self.assertEqual(v["verdict"], rs.NOT_SIGNIFICANT)
    self.assertLess(v["ci"][0], 0.0)
    v = _verdict(self._d(_d_with_t(5.0, 3, 1.0)), "D")
    self.assertEqual(v["verdict"], rs.REVERSED)       # higher ppl
    v = _verdict(self._d(_d_with_t(5.0, 3, -1.0)), "D")
    self.assertEqual(v["verdict"], rs.REPRODUCED)

  def test_pairs_by_seed(self):
    """A seed offset of 1% (2.4 ppl) hides nothing: d is per seed."""
    v = _verdict(self._d(np.full(3, 0.5) + [0, 0.01, -0.01]), "D")
    np.testing.assert_allclose(v["diff"], 0.5)
    self.assertEqual(v["verdict"], rs.REVERSED)

  def test_significant_below_the_minimal_effect_is_no_practical_effect(self):
    vs = rv.verdicts([report_fixtures.seed_row(0.0, {}, seeds=[0, 1, 2, 3]),
                      report_fixtures.seed_row(1.0, {"entropy": [0.0017, 0.0018,
                                                          0.0016, 0.0017]},
                                               seeds=[0, 1, 2, 3])])
    v = _verdict(vs, "C")
    self.assertGreater(v["ci"][0], 0.0)               # significant
    self.assertEqual(v["verdict"], rs.NO_EFFECT)


class OneSeedVerdictTest(absltest.TestCase):
  """A one-seed figure is held to Fig. 6's seed spread of the same
  contrast and reading."""

  def _rows(self, d_one, reading="mean_loss"):
    fig6 = [report_fixtures.seed_row(0.0, {}, seeds=[0, 1, 2, 3]),
            report_fixtures.seed_row(1.0, {"valid_ppl": [0.5, 0.3, 0.7, 0.5]},
                                     seeds=[0, 1, 2, 3])]
    fig8 = [report_fixtures.seed_row(0.0, {}, label="Fig. 8", reading=reading),
            report_fixtures.seed_row(1.0, {"valid_ppl": d_one}, label="Fig. 8",
                                     reading=reading)]
    return fig6 + fig8

  def test_floor_from_the_paired_seed_spread(self):
    ref = floors.seed_reference(self._rows(0.0))[("mean_loss", "kappa2",
                                                  "valid_ppl")]
    self.assertTrue(ref["paired"])
    self.assertEqual(ref["n"], 4)
    level = np.mean([max(240.0 * (1 + 0.01 * s), 240.0 * (1 + 0.01 * s) + d)
                     for s, d in zip(range(4), (0.5, 0.3, 0.7, 0.5))])
    self.assertAlmostEqual(ref["rel"], np.std([0.5, 0.3, 0.7, 0.5], ddof=1)
                           / level)

  def test_within_the_floor_not_significant_beyond_indicative(self):
    ref = floors.seed_reference(self._rows(0.0))[("mean_loss", "kappa2",
                                                  "valid_ppl")]
    self.assertEqual(ref["dof"], ref["n"] - 1)
    floor = rs.one_seed_floor(ref["rel"], ref["dof"], 240.0, 240.6)
    for d, want in ((0.95 * floor, rs.NOT_SIGNIFICANT),
                    (1.05 * floor, rs.INDICATIVE)):
      v = _verdict(rv.verdicts(self._rows(d)), "D", label="Fig. 8")
      self.assertEqual(v["verdict"], want, (d, v))
      self.assertEqual(rv.direction(v), "opposite")
    self.assertGreater(floor, 0.24)                   # above the 0.1% floor

  def test_no_unqualified_one_seed_verdict_and_no_floor_of_another_reading(
      self):
    v = _verdict(rv.verdicts(self._rows(5.0, reading="summed_loss")), "D",
                 label="Fig. 8")
    self.assertIsNone(v["floor_ref"])
    self.assertEqual(v["verdict"], rs.INDICATIVE)
    self.assertIn("no floor to hold it to", rv.evidence(v))
    self.assertEqual(rv.short(v), "(**rev.**)")

  def test_none_contrast_without_paired_seeds_takes_the_group_spread(self):
    rows = self._rows(0.0) + [report_fixtures.seed_row(0.0, {}, kappa1=0.0,
                                                       label="Fig. 8")]
    ref = floors.seed_reference(rows)[("mean_loss", "none", "valid_ppl")]
    alt = rows[1]
    self.assertFalse(ref["paired"])
    self.assertAlmostEqual(ref["rel"], np.sqrt(2) * alt["valid_ppl_std"]
                           / alt["valid_ppl_mean"])


def _member(kappa2, seed, steps, ppl, kappa1=100.0):
  return dict(kappa1=kappa1, kappa2=kappa2, target=1.0, seed=seed,
              metrics={"valid/ppl": (steps, ppl)})


class OverTrainingTest(absltest.TestCase):

  def test_final_step_and_time_average_can_disagree(self):
    """Lower at the last evaluation only: the final step says as the
    paper, the evaluations after warm-up say reversed."""
    steps = list(range(0, 50_001, 2_500))
    base = [240.0] * len(steps)
    alt = [200.0] + [241.0] * (len(steps) - 2) + [239.0]   # warm-up: 200
    rows = [report_fixtures.seed_row(0.0, {}),
            report_fixtures.seed_row(1.0, {"valid_ppl": -1.0})]
    members = {("Fig. 6", "mean_loss"): [_member(0.0, 0, steps, base),
                                        _member(1.0, 0, steps, alt)]}
    v = _verdict(rv.verdicts(rows, members), "D")
    self.assertEqual(rv.direction(v), "as the paper")
    t = v["training"]
    self.assertEqual(t["start"], 5_000)
    self.assertEqual(t["evaluations"], 19)
    self.assertAlmostEqual(t["diff"], (18 * 1.0 - 1.0) / 19)
    self.assertAlmostEqual(t["same_sign"], 1 / 19)
    self.assertEqual(rv.direction(t), "opposite")

  def test_members_without_curves_give_no_verdict_over_training(self):
    members = {("Fig. 6", "mean_loss"): [
        _member(0.0, 0, [50_000], [240.0]), _member(1.0, 0, [50_000],
                                                    [239.0])]}
    vs = rv.verdicts([report_fixtures.seed_row(0.0, {}),
                      report_fixtures.seed_row(1.0, {})], members)
    self.assertIsNone(_verdict(vs, "D")["training"])
    self.assertIsNone(_verdict(vs, "B")["training"])   # B: final step only


_KAPPA2 = (0.0, 1e-3, 1e-2, 1e-1, 1.0)


def _trend_rows(ppl_by_kappa2, seeds=(0, 1, 2)):
  """LocATER groups whose seed s has perplexity `ppl_by_kappa2[k][s]`."""
  rows = []
  for kappa2, ppl in zip(_KAPPA2, ppl_by_kappa2):
    ppl = list(np.broadcast_to(ppl, (len(seeds),)))
    rows.append(dict(label="Fig. 6", reading="mean_loss", kappa1=100.0,
                     kappa2=kappa2, seeds=list(seeds), n_seeds=len(seeds),
                     valid_ppl_values=ppl, valid_ppl_mean=float(np.mean(ppl)),
                     entropy_values=[2.8] * len(seeds), entropy_mean=2.8))
  return rows


class TrendTest(absltest.TestCase):

  def test_slope_per_decade_paired_over_seeds(self):
    offsets = np.array([0.0, 3.0, -2.0])                  # seed offsets
    ppl = [240 + offsets + 0.5 * i for i in range(5)]     # +0.5 per decade
    t = rv.trend(_trend_rows(ppl), "valid_ppl", -1)
    self.assertAlmostEqual(t["slope"], 0.5)
    self.assertEqual(t["best_kappa2"], 1e-3)

  def test_best_is_held_to_the_bonferroni_level(self):
    """A best-of-four difference whose t lies between the 95% and the
    Bonferroni critical values is not significant."""
    t_plain, t_bonf = rs.t_critical(2), rs.t_critical(2, rs.bonferroni(4))
    z = np.array([-1.0, 0.0, 1.0])                        # std 1
    for t_stat, want in (((t_plain + t_bonf) / 2, rs.NOT_SIGNIFICANT),
                         (1.2 * t_bonf, rs.REPRODUCED)):
      d = -1.0 + z * np.sqrt(3) / t_stat          # mean -1, t = t_stat
      ppl = [np.full(3, 240.0), 240.0 + d] + [np.full(3, 240.5)] * 3
      t = rv.trend(_trend_rows(ppl), "valid_ppl", -1)
      self.assertEqual(t["best_kappa2"], 1e-3)
      self.assertEqual(t["verdict"], want, t)

  def test_one_seed_uses_the_floor_at_the_bonferroni_level(self):
    ref = dict(rel=0.001, n=4, dof=3, transferred=False)
    floor = rs.t_critical(3, rs.bonferroni(4)) * 0.001 * 240.0
    for d, want in ((0.95 * floor, rs.NOT_SIGNIFICANT),
                    (1.05 * floor, rs.INDICATIVE)):
      ppl = [240.0, 240.0 - d, 241.0, 241.0, 241.0]
      t = rv.trend(_trend_rows(ppl, seeds=(0,)), "valid_ppl", -1, [ref])
      self.assertAlmostEqual(t["floor"], floor)
      self.assertEqual(t["verdict"], want)

  def test_needs_kappa2_zero_and_two_more(self):
    self.assertIsNone(rv.trend(_trend_rows([240.0, 241.0])[:2],
                                          "valid_ppl", -1))


if __name__ == "__main__":
  absltest.main()
