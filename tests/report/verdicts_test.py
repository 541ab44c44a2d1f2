"""Tests for qkspec.report.verdicts: verdicts from planted seeds."""
from absl.testing import absltest
import numpy as np

from qkspec.report import floors
from qkspec.report import run_cells
from qkspec.report import stats as rs
from qkspec.report import verdicts as rv
import report_fixtures


def _verdict(vs, claim, kind="kappa2", label="Fig. 6"):
  [v] = [v for v in vs if (v.claim, v.kind, v.label) == (claim, kind, label)]
  return v


def _judged(groups, held=None):
  return rv.verdicts(report_fixtures.cells_of(groups), held or {})


def _d_with_t(t, n, mean):
  z = np.linspace(-1, 1, n)
  return mean + z / z.std(ddof=1) * mean * np.sqrt(n) / t


class PairedVerdictTest(absltest.TestCase):

  def _d(self, d, seeds=(0, 1, 2)):
    return _judged([report_fixtures.seed_group(0.0, {}, seeds=list(seeds)),
                    report_fixtures.seed_group(1.0, {"valid_ppl": d},
                                               seeds=list(seeds))])

  def test_t_of_three_seeds_is_held_to_4_30(self):
    """t = 3.0 passed 2 x SE; it is not significant at n - 1 = 2 dof."""
    v = _verdict(self._d(_d_with_t(3.0, 3, 1.0)), "D")
    self.assertEqual(v.test.verdict, rs.NOT_SIGNIFICANT)
    self.assertLess(v.test.ci[0], 0.0)
    v = _verdict(self._d(_d_with_t(5.0, 3, 1.0)), "D")
    self.assertEqual(v.test.verdict, rs.REVERSED)       # higher ppl
    v = _verdict(self._d(_d_with_t(5.0, 3, -1.0)), "D")
    self.assertEqual(v.test.verdict, rs.REPRODUCED)

  def test_pairs_by_seed(self):
    """A seed offset of 1% (2.4 ppl) hides nothing: d is per seed."""
    v = _verdict(self._d(np.full(3, 0.5) + [0, 0.01, -0.01]), "D")
    np.testing.assert_allclose(v.test.diff, 0.5)
    self.assertEqual(v.test.verdict, rs.REVERSED)
    self.assertEqual(v.seeds, (0, 1, 2))

  def test_significant_below_the_minimal_effect_is_no_practical_effect(self):
    seeds = [0, 1, 2, 3]
    vs = _judged([report_fixtures.seed_group(0.0, {}, seeds=seeds),
                  report_fixtures.seed_group(1.0, {"entropy": [
                      0.0017, 0.0018, 0.0016, 0.0017]}, seeds=seeds)])
    v = _verdict(vs, "C")
    self.assertGreater(v.test.ci[0], 0.0)               # significant
    self.assertEqual(v.test.verdict, rs.NO_EFFECT)


class OneSeedVerdictTest(absltest.TestCase):

  def test_without_a_floor_it_is_indicative_only(self):
    vs = _judged([report_fixtures.seed_group(k, {"valid_ppl": 5.0 * k},
                                             label="Fig. 8")
                  for k in (0.0, 1.0)])
    t = _verdict(vs, "D", label="Fig. 8").test
    self.assertIsNone(t.floor)
    self.assertEqual(t.verdict, rs.INDICATIVE)

  def test_none_verdicts_say_they_rest_on_the_sqrt2_rule(self):
    groups = [report_fixtures.seed_group(k, {"valid_ppl": [0.5, 0.3, 0.7]
                                             if k else 0.0}, seeds=[0, 1, 2])
              for k in (0.0, 1.0)]
    groups += [report_fixtures.seed_group(0.0, {}, kappa1=0.0,
                                          label="Fig. 8"),
               report_fixtures.seed_group(0.0, {}, label="Fig. 8"),
               report_fixtures.seed_group(1.0, {"valid_ppl": 9.0},
                                          label="Fig. 8")]
    cells = report_fixtures.cells_of(groups)
    held = floors.candidates(floors.seed_references(cells), {})
    vs = rv.verdicts(cells, held)
    none = _verdict(vs, "D", kind="none", label="Fig. 8")
    self.assertTrue(none.test.sqrt2)
    self.assertFalse(none.test.ref.paired)
    self.assertFalse(_verdict(vs, "D", label="Fig. 8").test.sqrt2)

  def test_the_distinct_members_of_a_verdict(self):
    base = report_fixtures.seed_group(0.0, {}, kappa1=0.0, label="Fig. 8")
    alt = report_fixtures.seed_group(1.0, {}, label="Fig. 8")
    [v] = [v for v in _judged([base, alt]) if v.claim == "B"]
    self.assertEqual(v.base_id, ((1, 32), 0.0, 0.0, 1.0, (0,), None))
    self.assertEqual(v.alt_id,
                     ((1, 32), 100.0, 1.0, 1.0, (0,), "mean_loss"))
    self.assertEqual(v.inits, frozenset({(1, 32, 0)}))


def _curve(kappa1, kappa2, seed, steps, ppl):
  m = report_fixtures.member(kappa1, kappa2, seed, valid_ppl=ppl[-1])
  m["metrics"]["valid/ppl"] = (np.asarray(steps), np.asarray(ppl, float))
  return m


class OverTrainingTest(absltest.TestCase):

  def _vs(self, steps, base, alt):
    run = report_fixtures.run("r", [_curve(100.0, 0.0, 0, steps, base),
                                    _curve(100.0, 1.0, 0, steps, alt)])
    return report_fixtures.evidence_of([run]).verdicts

  def test_final_step_and_time_average_can_disagree(self):
    """Lower at the last evaluation only: the final step says as the
    paper, the evaluations after warm-up say reversed."""
    steps = list(range(0, 50_001, 2_500))
    base = [240.0] * len(steps)
    alt = [200.0] + [241.0] * (len(steps) - 2) + [239.0]   # warm-up: 200
    v = _verdict(self._vs(steps, base, alt), "D")
    self.assertLess(v.test.diff, 0)                  # as the paper
    t = v.training
    self.assertEqual(t.start, 5_000)
    self.assertEqual(t.evaluations, 19)
    self.assertAlmostEqual(t.test.diff, (18 * 1.0 - 1.0) / 19)
    self.assertAlmostEqual(t.same_sign, 1 / 19)

  def test_members_without_curves_give_no_verdict_over_training(self):
    vs = self._vs([50_000], [240.0], [239.0])
    self.assertIsNone(_verdict(vs, "D").training)
    self.assertIsNone(_verdict(vs, "B").training)     # B: final step only


_KAPPA2 = (0.0, 1e-3, 1e-2, 1e-1, 1.0)


def _trend_groups(ppl_by_kappa2, seeds=(0, 1, 2)):
  """LocATER groups whose seed s has perplexity `ppl_by_kappa2[k][s]`."""
  out = []
  for kappa2, ppl in zip(_KAPPA2, ppl_by_kappa2):
    ppl = tuple(np.broadcast_to(ppl, (len(seeds),)))
    out.append(run_cells.group(
        {"valid_ppl": ppl, "entropy": (2.8,) * len(seeds)}, figure="6",
        smoke=False, reading="mean_loss", run_dirs=("r",),
        d_model=128, num_layers=1, seq_len=64, kappa1=100.0, kappa2=kappa2,
        target=1.0, seeds=tuple(seeds), final_step=50_000,
        num_steps=50_000))
  return out


class TrendTest(absltest.TestCase):

  def test_slope_per_decade_paired_over_seeds(self):
    offsets = np.array([0.0, 3.0, -2.0])                  # seed offsets
    ppl = [240 + offsets + 0.5 * i for i in range(5)]     # +0.5 per decade
    t = rv.trend(_trend_groups(ppl), "valid_ppl", -1)
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
      t = rv.trend(_trend_groups(ppl), "valid_ppl", -1)
      self.assertEqual(t["best_kappa2"], 1e-3)
      self.assertEqual(t["test"].verdict, want, t)

  def test_one_seed_uses_the_floor_at_the_bonferroni_level(self):
    ref = floors.Reference(rel=0.001, n=4, dof=3, label="Fig. 6",
                           arch=(1, 128), source="seeds")
    floor = rs.t_critical(3, rs.bonferroni(4)) * 0.001 * 240.0
    for d, want in ((0.95 * floor, rs.NOT_SIGNIFICANT),
                    (1.05 * floor, rs.INDICATIVE)):
      ppl = [240.0, 240.0 - d, 241.0, 241.0, 241.0]
      t = rv.trend(_trend_groups(ppl, seeds=(0,)), "valid_ppl", -1, [ref],
                   (1, 128))
      self.assertAlmostEqual(t["test"].floor, floor)
      self.assertEqual(t["test"].verdict, want)

  def test_needs_kappa2_zero_and_two_more(self):
    self.assertIsNone(rv.trend(_trend_groups([240.0, 241.0])[:2],
                               "valid_ppl", -1))


if __name__ == "__main__":
  absltest.main()
