"""Tests for qkspec.report.stats: each rule from both sides."""
from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from scipy import stats

from qkspec.report import stats as rs
import report_fixtures


def _with_t(t, n=3, mean=1.0):
  """n differences of mean `mean` whose paired t statistic is `t`."""
  z = np.linspace(-1, 1, n)
  z = z / z.std(ddof=1)
  return mean + z * mean * np.sqrt(n) / t


class TQuantileTest(parameterized.TestCase):

  # Student's t table (two-sided): t such that P(|T| <= t) = level.
  @parameterized.parameters((1, 0.95, 12.7062047), (2, 0.95, 4.30265273),
                            (3, 0.95, 3.18244631), (30, 0.95, 2.04227246),
                            (2, 0.99, 9.92484320))
  def test_critical_value_is_the_tables(self, dof, level, table):
    self.assertAlmostEqual(rs.t_critical(dof, level), table, places=7)


class PairedTest(absltest.TestCase):

  def test_interval_matches_scipy(self):
    d = np.array([0.3, 0.1, 0.25, 0.2])
    got = rs.paired_test(d)
    lo, hi = stats.t.interval(0.95, 3, loc=d.mean(), scale=stats.sem(d))
    np.testing.assert_allclose(got["ci"], (lo, hi), rtol=1e-9)
    self.assertAlmostEqual(got["t"], stats.ttest_1samp(d, 0).statistic)

  def test_three_seeds_need_t_above_4_30_not_2(self):
    self.assertFalse(rs.paired_test(_with_t(4.2))["significant"])
    self.assertTrue(rs.paired_test(_with_t(4.4))["significant"])

  def test_four_seeds_need_t_above_3_18(self):
    self.assertFalse(rs.paired_test(_with_t(3.1, n=4))["significant"])
    self.assertTrue(rs.paired_test(_with_t(3.3, n=4))["significant"])

  def test_one_seed_is_refused(self):
    with self.assertRaisesRegex(ValueError, "two seeds"):
      rs.paired_test([1.0])


class MinimalEffectTest(parameterized.TestCase):

  @parameterized.parameters(
      ("valid_ppl", 250.0, 0.24, 0.26),     # 0.1% of 250
      ("entropy", 2.8, 0.009, 0.011),       # 0.01 nats
      ("scale", 0.18, 0.019, 0.021))        # 10% of the larger mean
  def test_below_is_no_practical_effect_above_is_judged(
      self, quantity, level, below, above):
    for diff, want in ((below, rs.NO_EFFECT), (above, rs.REPRODUCED)):
      m = rs.min_effect(quantity, level, level + diff)
      self.assertEqual(rs.decide(diff, +1, m, rs.SIGNIFICANT, False), want)

  def test_significant_but_tiny_is_no_practical_effect(self):
    d = np.full(4, 0.0017) + [0, 1e-4, -1e-4, 0]   # +0.0017 nats, t ~ 30
    test = rs.paired_test(d)
    self.assertTrue(test["significant"])
    self.assertEqual(rs.decide(test["mean"], +1,
                               rs.min_effect("entropy", 2.8, 2.8),
                               rs.SIGNIFICANT, False), rs.NO_EFFECT)


class OneSeedTest(absltest.TestCase):

  def test_floor_is_t_times_the_relative_seed_spread(self):
    floor = rs.one_seed_floor(0.001, 3, 240.0, 250.0)
    self.assertAlmostEqual(floor, stats.t.ppf(0.975, 3) * 0.25, places=9)

  def test_inside_the_floor_is_not_significant_beyond_is_indicative(self):
    floor = rs.one_seed_floor(0.001, 3, 240.0, 250.0)     # ~0.80 ppl
    for diff, want in ((0.95 * floor, rs.NOT_SIGNIFICANT),
                       (1.05 * floor, rs.INDICATIVE)):
      got = rs.decide(diff, -1, rs.min_effect("valid_ppl", 240, 250),
                      rs.SIGNIFICANT if abs(diff) > floor else rs.BELOW,
                      one_seed=True)
      self.assertEqual(got, want)

  def test_between_floors_is_undetermined_one_seed_never_reproduced(self):
    for sign in (+1, -1):
      self.assertEqual(rs.decide(5.0, sign, 0.1, rs.SIGNIFICANT, True),
                       rs.INDICATIVE)
      self.assertEqual(rs.decide(5.0, sign, 0.1, rs.BETWEEN, True),
                       rs.UNDETERMINED)
    self.assertEqual(rs.decide(0.05, 1, 0.1, rs.BETWEEN, True), rs.NO_EFFECT)

  def test_p_value_at_the_critical_value_is_the_level(self):
    for dof in (1, 3, 5):
      self.assertAlmostEqual(rs.t_p_value(rs.t_critical(dof), dof), 0.05)
      self.assertAlmostEqual(rs.t_p_value(-rs.t_critical(dof), dof), 0.05)
    self.assertAlmostEqual(rs.paired_test([0.3, 0.1, 0.25, 0.2])["p"],
                           stats.ttest_1samp([0.3, 0.1, 0.25, 0.2], 0).pvalue)


class PooledTest(absltest.TestCase):

  def test_sign_test_is_the_exact_binomial(self):
    self.assertAlmostEqual(rs.sign_test(12, 12), 2 / 4096)
    self.assertAlmostEqual(rs.sign_test(0, 12), 2 / 4096)
    self.assertAlmostEqual(rs.sign_test(11, 12), 2 * 13 / 4096)
    self.assertAlmostEqual(rs.sign_test(6, 6), 2 / 64)
    self.assertEqual(rs.sign_test(3, 6), 1.0)
    self.assertEqual(rs.sign_test(0, 0), 1.0)

  def test_holm_against_its_step_down_by_hand(self):
    p = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06,
    # 0.04 -> running max 0.02, 0.03, 0.06, 0.06, in the family's order
    np.testing.assert_allclose(rs.holm(p), [0.03, 0.06, 0.06, 0.02])
    # on each side of the family-wise 5%: 0.03 holds, 0.06 does not
    self.assertEqual(list(rs.holm(p) < 0.05), [True, False, False, True])
    np.testing.assert_allclose(rs.holm([0.5, 0.9]), [1.0, 1.0])


class TimeAverageTest(absltest.TestCase):

  def test_mean_and_sign_fraction_after_warm_up(self):
    steps = np.arange(0, 1000, 100)
    base = (steps, np.zeros(10))
    alt = (steps, np.where(steps < 300, -50.0, [1, 1, 1, -1, 1, 1, 1, 1,
                                                 1, 1]))
    mean, positive, n = rs.time_average(base, alt, start=300)
    self.assertEqual(n, 7)
    self.assertAlmostEqual(mean, 5 / 7)
    self.assertAlmostEqual(positive, 6 / 7)

  def test_only_common_steps_count(self):
    mean, _, n = rs.time_average(([0, 10, 20], [0, 0, 0]),
                                 ([10, 15, 20], [1, 9, 3]), start=0)
    self.assertEqual((n, mean), (2, 2.0))


class CurveTest(absltest.TestCase):

  def test_slope_and_interval_match_scipy(self):
    x, y = np.log10([1e-3, 1e-2, 1e-1, 1.0]), np.array([1.0, 1.3, 1.9, 2.2])
    got, want = rs.slope(x, y), stats.linregress(x, y)
    self.assertAlmostEqual(got["slope"], want.slope)
    half = stats.t.ppf(0.975, 2) * want.stderr
    np.testing.assert_allclose(got["ci"], (want.slope - half,
                                           want.slope + half))
    self.assertIsNone(rs.slope([0, 1], [0, 1])["ci"])

  def test_bonferroni_widens_the_critical_value(self):
    self.assertAlmostEqual(rs.bonferroni(4), 0.9875)
    self.assertAlmostEqual(rs.t_critical(3, rs.bonferroni(4)),
                           stats.t.ppf(1 - 0.0125 / 2, 3), places=9)


class GapTest(absltest.TestCase):

  def test_differences_at_common_steps(self):
    steps, d = rs.step_differences(
        report_fixtures.gap_member(
            100.0, 0.0, [300.0, 250.0, 240.0])["metrics"]["valid/ppl"],
        report_fixtures.gap_member(100.0, 1.0, [301.0, 245.0], steps=(10, 30))[
            "metrics"]["valid/ppl"])
    np.testing.assert_array_equal(steps, [10])
    np.testing.assert_allclose(d, [51.0])


class SpanTest(absltest.TestCase):

  def test_low_to_high_or_one_value_where_they_print_alike(self):
    self.assertEqual(rs.span([0.31, 0.004, 0.2]), "0.004 to 0.31")
    self.assertEqual(rs.span([1.001, 1.002]), "1")
    self.assertEqual(rs.span([-0.05, 0.02], "+.2%"), "-5.00% to +2.00%")


if __name__ == "__main__":
  absltest.main()
