"""Tests for qkspec.report.pooled: claims pooled over cells, and Holm."""
from absl.testing import absltest
import numpy as np

from qkspec.report import pooled
from qkspec.report import stats as rs
from qkspec.report import verdicts as rv
import report_fixtures


def _figures(entropy_diffs, reading="mean_loss"):
  """One-seed figures whose kappa2 = 1 group's entropy is higher by each
  of `entropy_diffs`; Fig. 6 with 4 seeds gives the floors."""
  rows = [report_fixtures.seed_row(k, {"entropy": [0.001, 0.002, 0.0, 0.001]
                                       if k else 0.0}, seeds=[0, 1, 2, 3])
          for k in (0.0, 1.0)]
  for i, d in enumerate(entropy_diffs):
    rows += [report_fixtures.seed_row(k, {"entropy": d * k},
                                      label=f"Fig. {20 + i}", reading=reading)
             for k in (0.0, 1.0)]
  return rows


def _claim(tests, claim="C", kind="kappa2", reading=pooled.BOTH):
  [t] = [t for t in tests if (t["claim"], t["kind"], t["reading"])
         == (claim, kind, reading)]
  return t


class SignTestTest(absltest.TestCase):

  def test_cells_each_below_the_minimal_effect_agree_in_sign(self):
    """Thirteen cells of about +0.001 nats: each "no practical effect",
    together 13 of 13 in the paper's direction, p = 2 / 2^13, which holds
    after Holm over this report's family (the cells' own tests, the pooled
    ones)."""
    vs = rv.verdicts(_figures([0.001] * 12))
    cells = [v for v in vs if v["claim"] == "C" and v["label"] != "Fig. 6"]
    self.assertEqual({v["verdict"] for v in cells}, {rs.NO_EFFECT})
    tests = pooled.claim_tests(vs)
    t = _claim(tests)
    self.assertEqual((t["toward"], t["against"], t["cells"], t["units"]),
                     (13, 0, 13, 13))           # Fig. 6's +0.001 too
    self.assertAlmostEqual(t["p"], 2 / 2 ** 13)
    family = pooled.family(vs, [], [], tests)
    [held] = [x for x in pooled.with_holm(tests, family)
              if (x["claim"], x["kind"], x["reading"])
              == ("C", "kappa2", pooled.BOTH)]
    self.assertTrue(held["holds"])
    self.assertEqual(held["family"], len(family))

  def test_too_few_or_mixed_cells_are_no_direction(self):
    for diffs in ([0.001] * 3, [0.001, -0.001] * 4):
      t = _claim(pooled.claim_tests(rv.verdicts(_figures(diffs))))
      self.assertGreater(t["p"], 0.05, diffs)

  def test_holm_over_a_large_family_can_undo_a_small_p(self):
    vs = rv.verdicts(_figures([0.001] * 12))
    tests = pooled.claim_tests(vs)
    many = [("other", 0.5)] * 400 + pooled.family(vs, [], [], tests)
    [held] = [x for x in pooled.with_holm(tests, many)
              if (x["claim"], x["kind"], x["reading"])
              == ("C", "kappa2", pooled.BOTH)]
    self.assertLess(held["p"], 0.05)
    self.assertFalse(held["holds"])


class UnitsTest(absltest.TestCase):

  def _none_cells(self, fairseq_diff):
    """Two readings' none contrasts on one shared no-LocATER member."""
    rows = []
    for reading, d in (("mean_loss", -1.0), ("summed_loss", fairseq_diff)):
      rows.append(report_fixtures.seed_row(1.0, {"valid_ppl": d},
                                           reading=reading))
      none = report_fixtures.seed_row(0.0, {}, kappa1=0.0, reading=reading)
      rows.append(dict(none, run_dirs=["fig_none"]))
    for r in rows:
      r.setdefault("run_dirs", [f"fig_{r['reading']}"])
    return [v for v in rv.verdicts(rows) if v["kind"] == "none"
            and v["claim"] == "D"]

  def test_cells_sharing_a_member_are_one_unit(self):
    cells = self._none_cells(-2.0)
    self.assertEqual(cells[0]["base_id"], cells[1]["base_id"])
    self.assertNotEqual(cells[0]["alt_id"], cells[1]["alt_id"])
    self.assertLen(pooled.units(cells), 1)
    t = pooled.sign_test(cells)
    self.assertEqual((t["cells"], t["units"], t["runs"], t["toward"]),
                     (2, 1, 1, 2))
    self.assertEqual(t["units_toward"], 1)
    self.assertEqual(t["p"], 1.0)            # one unit: no evidence
    # its cells disagree: the unit counts neither way
    t = pooled.sign_test(self._none_cells(+2.0))
    self.assertEqual((t["units_toward"], t["units_against"]), (0, 0))

  def test_locater_members_differ_by_reading(self):
    row = report_fixtures.seed_row(1.0, {})
    self.assertNotEqual(rv.member_id(row),
                        rv.member_id(dict(row, reading="summed_loss")))
    none = report_fixtures.seed_row(0.0, {}, kappa1=0.0)
    self.assertEqual(rv.member_id(none),
                     rv.member_id(dict(none, reading="summed_loss")))


class FamilyTest(absltest.TestCase):

  def test_every_test_once_and_named(self):
    vs = rv.verdicts(_figures([0.001] * 2))
    tests = pooled.claim_tests(vs)
    trends = [dict(slope_p=0.2, p=0.3), dict(slope_p=None, p=0.1)]
    stripes = [dict(p_values=[0.005, 0.5])]
    family = pooled.family(vs, trends, stripes, tests)
    self.assertEqual(len(family), len(vs) + 3 + 2 + len(tests))
    self.assertEqual(pooled.family_words(family),
                     f"{len(vs)} final step, 1 slope over kappa2, 2 best "
                     f"kappa2, 2 stripe test, {len(tests)} pooled sign test")
    self.assertTrue(all(np.isfinite(p) for _, p in family))


if __name__ == "__main__":
  absltest.main()
