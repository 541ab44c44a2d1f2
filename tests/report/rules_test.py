"""Tests for qkspec.report.rules: the rules, their floors, their errors."""
import dataclasses

from absl.testing import absltest

from qkspec.report import floors
from qkspec.report import rules
import report_fixtures

_SEED = {("mean_loss", "kappa2", q): floors.Reference(
    rel=r, n=4, dof=3, label="Fig. 6", arch=(1, 128), source="seeds")
         for q, r in (("scale", 2e-4), ("entropy", 2.4e-4),
                      ("valid_ppl", 1.7e-4))}
_RERUN = {((6, 32), "mean_loss", "valid_ppl"): floors.Reference(
    rel=5.1e-4, n=5, dof=5, label="Fig. 10", arch=(6, 32), source="rerun")}


class RulesTest(absltest.TestCase):

  def test_every_rule_says_which_way_it_errs_and_the_families(self):
    ev = dataclasses.replace(
        report_fixtures.evidence_of(report_fixtures.sweep(
            "r", "Fig. 6", none=True)), seed_refs=_SEED, reruns=_RERUN)
    md = "\n".join(rules.markdown(ev))
    for rule, how in rules.ERRS:
      self.assertIn(f"- {rule}: {how}", md)
      self.assertRegex(how, "toward too (much|little)")
    self.assertIn("errs both ways, by quantity", md)
    self.assertIn("B, C and D pooled over both readings (3 tests) are the "
                  "primary claims, held to Holm's correction over them; the "
                  "none contrast's three pooled over both readings (3) a "
                  "secondary family with its own Holm;", md)
    self.assertIn("data.seed = 0 in every run", md)
    # the seed spread against the rerun measured elsewhere: 3.0 x
    self.assertIn("; the rerun noise of perplexity against Fig. 6's seed "
                  "spread: Fig. 10, literal: 3.0 x.", md)

  def test_a_row_per_seed_reference_and_per_rerun(self):
    table = rules.floor_table(_SEED, _RERUN)
    self.assertEqual(table[2], "| seeds, kappa2, literal | 0.0002 | 0.00024 "
                     "| 0.00017 | Fig. 6, paired difference over 4 seeds |")
    self.assertEqual(table[3], "| rerun, L = 6, d = 32, literal | - | - | "
                     "0.00051 | Fig. 10 run twice, 5 member pairs |")
    self.assertLen(table, 4)


if __name__ == "__main__":
  absltest.main()
