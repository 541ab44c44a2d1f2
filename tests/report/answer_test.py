"""Tests for qkspec.report.answer: the first screen, its tables."""
from absl.testing import absltest

from qkspec.report import answer
from qkspec.report import verdicts as rv
import report_fixtures


class AnswerTest(absltest.TestCase):

  def test_first_screen_has_a_line_per_claim_and_the_table(self):
    rows = [report_fixtures.seed_row(0.0, {}, seeds=[0, 1, 2]),
            report_fixtures.seed_row(1.0, {"scale": 0.1,
                                    "valid_ppl": [1.0, 1.1, 0.9]},
                                     seeds=[0, 1, 2]),
            report_fixtures.seed_row(0.0, {}, kappa1=0.0, seeds=[0, 1, 2])]
    vs = rv.verdicts(rows)
    lines = answer.answer(vs, [])
    self.assertLen([x for x in lines if x.startswith("- **")], 6)
    self.assertIn("- **Perplexity (D, valid perplexity lower): reversed in "
                  "1 of 1 cells.**", "\n".join(lines))
    self.assertIn("Beyond the paper: no LocATER -> LocATER", "\n".join(lines))
    [row] = answer.verdict_table(vs)[2:]
    self.assertEqual(row, "| Fig. 6 | literal (mean_loss) | 3 | **rev.** | "
                     "~0 | **rev.** | - | - | **rev.** | ~0 | **rev.** |")
    self.assertLen(answer.detail_table(vs), 2 + 6)


if __name__ == "__main__":
  absltest.main()
