"""Tests for qkspec.report.answer: the first screen, its tables."""
from absl.testing import absltest

from qkspec.report import answer
from qkspec.report import pooled
from qkspec.report import verdicts as rv
import report_fixtures


def _first_screen(rows, **kwargs):
  vs = rv.verdicts(rows, **kwargs)
  tests = pooled.claim_tests(vs)
  tests = pooled.with_holm(tests, pooled.family(vs, [], [], tests))
  return vs, "\n".join(answer.answer(vs, [], tests=tests))


class AnswerTest(absltest.TestCase):

  def test_first_screen_has_a_line_per_claim_and_the_table(self):
    rows = [report_fixtures.seed_row(0.0, {}, seeds=[0, 1, 2]),
            report_fixtures.seed_row(1.0, {"scale": 0.1,
                                    "valid_ppl": [1.0, 1.1, 0.9]},
                                     seeds=[0, 1, 2]),
            report_fixtures.seed_row(0.0, {}, kappa1=0.0, seeds=[0, 1, 2])]
    vs, text = _first_screen(rows)
    self.assertLen([x for x in text.splitlines() if x.startswith("- **")], 6)
    self.assertIn("- **Perplexity (D, valid perplexity lower): against the "
                  "paper in 1 of 1 cell (sign test p = 1; not after Holm "
                  "over the report's 18 tests, adjusted p = 1).** By cell: "
                  "reversed in 1;", text)
    self.assertIn("- **Entropy (C, entropy higher): no difference of either "
                  "sign in 1 cell", text)
    # beyond the paper: no direction words of the paper's
    self.assertIn("Beyond the paper (it compares with no LocATER only for "
                  "Fig. 7's stripes): no LocATER -> LocATER (kappa1 = 100, "
                  "kappa2 = 1), 1 cell on 1 no-LocATER run:", text)
    none = text[text.index("Beyond the paper"):]
    self.assertNotIn("as the paper", none)
    self.assertIn("- **Perplexity: higher with LocATER in 1 of 1 cell", none)
    [row] = answer.verdict_table(vs)[2:]
    self.assertEqual(row, "| Fig. 6 | literal (mean_loss) | 3 | **rev.** | "
                     "~0 | **rev.** | - | - | higher | ~0 | higher |")
    self.assertLen(answer.detail_table(vs), 2 + 6)

  def test_one_seed_counts_read_indicative_and_transferred_apart(self):
    """Fig. 8 (d = 32) held to Fig. 6's (d = 128) seed spread: its one-seed
    verdicts say so wherever they are counted."""
    fig6 = [report_fixtures.seed_row(k, {"valid_ppl": [0.5, 0.3, 0.7, 0.5]
                                         if k else 0.0}, seeds=[0, 1, 2, 3])
            for k in (0.0, 1.0)]
    fig8 = [report_fixtures.seed_row(k, {"valid_ppl": 5.0 * k},
                                     label="Fig. 8") for k in (0.0, 1.0)]
    for r in fig8:
      r["d_model"] = 32
    vs, text = _first_screen(fig6 + fig8)
    self.assertIn("By cell: reversed in 1; indicative (one seed), reversed in "
                  "1 (1 on a floor transferred from Fig. 6); difference", text)
    [v] = [v for v in vs if (v["label"], v["claim"]) == ("Fig. 8", "D")]
    self.assertEqual(rv.short(v), "(**rev.**)†")
    self.assertEqual(rv.full(v), "indicative (one seed), opposite; floor "
                     "transferred from Fig. 6")
    self.assertIn("(Fig. 6 seeds), 1 seed", rv.evidence(v))


if __name__ == "__main__":
  absltest.main()
