"""Tests for qkspec.report.pooled: claims pooled in independent units, and
the families Holm corrects over. Every p below is counted by hand."""
import dataclasses

from absl.testing import absltest

from qkspec.report import pooled
import report_fixtures

_FIGS = ("Fig. 6", "Fig. 8", "Fig. 9", "Fig. 10", "Fig. 11", "Fig. 12")
_BOTH = ("mean_loss", "summed_loss")


def _programs(diffs=lambda fig, reading: {}, none=False):
  """Each figure's both readings trained side by side, seed 0, as the
  records hold them: one initialisation per architecture."""
  runs = []
  for fig in _FIGS:
    runs += report_fixtures.sweep(
        fig.lower().replace(". ", ""), fig, none=none,
        diffs={r: diffs(fig, r) for r in _BOTH}, readings=_BOTH)
  return runs


def _claim(tests, claim, kind="kappa2", reading=pooled.BOTH):
  [t] = [t for t in tests if (t.claim, t.kind, t.reading)
         == (claim, kind, reading)]
  return t


def _records_like():
  """The records' signs: B up in all 12 cells; C up but in Fig. 12's
  fairseq cell; D up under literal, down in Figs. 6, 8, 9 fairseq."""
  def diffs(fig, reading):
    fairseq = reading == "summed_loss"
    return {"scale": 0.01,
            "entropy": -0.002 if fig == "Fig. 12" and fairseq else 0.002,
            "valid_ppl": -0.05 if fairseq and fig in _FIGS[:3] else 0.05}
  return report_fixtures.evidence_of(_programs(diffs)).pooled


class UnitsTest(absltest.TestCase):

  def test_one_unit_per_architecture(self):
    """Both readings of one program start from one initialisation: 12
    cells of 6 architectures are 6 units, all against the paper, p = 2 x
    2^-6 (not 2 x 2^-12 over the cells)."""
    t = _claim(_records_like(), "B")
    self.assertEqual((t.cells, t.against, t.units, t.units_against,
                      t.units_toward), (12, 12, 6, 6, 0))
    self.assertEqual(t.p, 2 * 0.5 ** 6)
    # within one reading the 6 cells are 6 units
    t = _claim(_records_like(), "B", reading="mean_loss")
    self.assertEqual((t.cells, t.units, t.p), (6, 6, 2 * 0.5 ** 6))

  def test_a_unit_whose_cells_disagree_counts_neither_way(self):
    c, d = _claim(_records_like(), "C"), _claim(_records_like(), "D")
    self.assertEqual((c.toward, c.against, c.units_toward, c.units_against),
                     (11, 1, 5, 0))
    self.assertEqual(c.p, 2 * 0.5 ** 5)                # 5 of 5 units
    self.assertEqual((d.toward, d.against, d.units_toward, d.units_against),
                     (3, 9, 0, 3))
    self.assertEqual(d.p, 2 * 0.5 ** 3)                # 3 of 3, 3 split

  def test_cells_that_share_a_seed_of_one_architecture_are_one_unit(self):
    """Fig. 6's literal cell (seeds 0 and 1, two runs) and its fairseq
    cell (seed 1, trained beside the literal seed 1) share seed 1's
    initialisation: one unit; with Fig. 8's cell, 2 units, p = 2 x 2^-2."""
    runs = (report_fixtures.sweep("a", "Fig. 6", {"scale": 0.01})
            + report_fixtures.sweep("b", "Fig. 6", {"scale": 0.01}, seed=1,
                                    readings=_BOTH)
            + report_fixtures.sweep("c", "Fig. 8", {"scale": 0.01}))
    t = _claim(report_fixtures.evidence_of(runs).pooled, "B")
    self.assertEqual((t.cells, t.units), (3, 2))
    self.assertEqual(t.p, 2 * 0.5 ** 2)


class FamilyTest(absltest.TestCase):

  def test_the_primary_family_is_the_three_claims_over_both_readings(self):
    """Holm over B, C, D pooled (p = 1/32, 1/16, 1/4): 3/32, 2/16, 1/4;
    per reading: descriptive, in no family."""
    tests = _records_like()
    primary = [t for t in tests if t.family == pooled.PRIMARY]
    self.assertEqual([(t.claim, t.reading) for t in primary],
                     [(c, pooled.BOTH) for c in "BCD"])
    self.assertEqual([t.holm for t in primary], [3 / 32, 2 / 16, 1 / 4])
    self.assertEqual({t.size for t in primary}, {3})
    self.assertFalse(any(t.holds for t in primary))
    for t in tests:
      if t.reading != pooled.BOTH:
        self.assertIsNone(t.family)
        self.assertIsNone(t.holm)
        self.assertFalse(t.holds)

  def test_the_none_contrast_is_a_family_of_its_own(self):
    runs = _programs(lambda fig, r: {"scale": 0.01, "entropy": 0.002,
                                     "valid_ppl": 0.05}, none=True)
    tests = report_fixtures.evidence_of(runs).pooled
    none = [t for t in tests if t.family == pooled.NONE]
    self.assertEqual([(t.claim, t.kind) for t in none],
                     [(c, "none") for c in "BCD"])
    # kappa2 = 1 sits above the no-LocATER member's level in all three
    self.assertEqual([(t.units, t.p) for t in none], [(6, 2 * 0.5 ** 6)] * 3)
    self.assertEqual([t.holm for t in none], [3 * 2 * 0.5 ** 6] * 3)
    self.assertEqual(
        [t.holm for t in tests if t.family == pooled.PRIMARY],
        [3 * 2 * 0.5 ** 6] * 3)        # its own 3, not 6 with the none's

  def test_holds_below_five_percent_in_its_family(self):
    t = _claim(_records_like(), "B")
    self.assertFalse(t.holds)                        # 3/32 > 0.05
    self.assertTrue(dataclasses.replace(t, holm=0.049).holds)


if __name__ == "__main__":
  absltest.main()
