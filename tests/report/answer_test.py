"""Tests for qkspec.report.answer: the first screen, its tables."""
import dataclasses

from absl.testing import absltest

from qkspec.report import answer
from qkspec.report import backlog
from qkspec.report import stats as rs
from qkspec.report import stripes
from qkspec.report import verdicts as rv
import report_fixtures

_BOTH = ("mean_loss", "summed_loss")


def _text(ev) -> str:
  return "\n".join(answer.answer(ev))


class AnswerTest(absltest.TestCase):

  def test_a_line_per_claim_its_units_and_its_family(self):
    runs = []
    for seed in (0, 1, 2):                  # Fig. 6: 3 seeds, one program
      runs += report_fixtures.sweep(
          f"s{seed}", "Fig. 6", {"scale": 0.1, "valid_ppl": [1.0, 1.1,
                                                             0.9][seed]},
          seed=seed, readings=_BOTH, none=True)
    ev = report_fixtures.evidence_of(runs)
    text = _text(ev)
    self.assertLen([x for x in text.splitlines() if x.startswith("- **")], 6)
    self.assertIn("- **Perplexity (D, valid perplexity lower): against the "
                  "paper in 2 of 2 cells and 1 of 1 unit (sign test p = 1; "
                  "not after Holm over the 3 primary claims, adjusted p = "
                  "1).** literal: against the paper in 1 of 1 cell (p = 1), "
                  "fairseq: against the paper in 1 of 1 cell (p = 1). By "
                  "cell: reversed in 2;", text)
    self.assertIn("here 1 unit, one per architecture;", text)
    self.assertIn("data.seed = 0 in every run", text)
    self.assertIn("- **Entropy (C, entropy higher): no difference of either "
                  "sign in 2 cells", text)
    # beyond the paper: its own family, no direction words of the paper's
    none = text[text.index("Beyond the paper"):]
    self.assertIn("no LocATER -> LocATER (kappa1 = 100, kappa2 = 1), 2 cells "
                  "on 3 distinct no-LocATER members; pooled over both "
                  "readings, a family of its own:", none)
    self.assertNotIn("as the paper", none)
    self.assertIn("- **Perplexity: higher with LocATER in 2 of 2 cells and 1 "
                  "of 1 unit (sign test p = 1; not after Holm over its "
                  "family's 3, adjusted p = 1).**", none)
    [row] = answer.verdict_table(ev.verdicts)[2:3]
    self.assertEqual(row, "| Fig. 6 | literal (mean_loss) | 3 | **rev.** | "
                     "~0 | **rev.** | - | - | higher | ~0 | higher |")
    self.assertLen(answer.detail_table(ev.verdicts), 2 + 12)

  def test_one_seed_counts_undetermined_and_other_noise_apart(self):
    """Fig. 8 (no noise measured on it) beyond Fig. 6's floor only: the
    counts say undetermined, and that it was held to other architectures'
    noise; a member trained twice counts once."""
    runs = []
    for seed, d in enumerate((0.5, 0.3, 0.7, 0.5)):
      runs += report_fixtures.sweep(f"s{seed}", "Fig. 6",
                                    {"valid_ppl": d}, seed=seed)
    rel = 0.163 / 243.6                               # Fig. 6's, about
    fig8 = report_fixtures.sweep("fig8", "Fig. 8", {"valid_ppl": 0.8},
                                 none=True)
    fig8_again = report_fixtures.run("fig8_none", [report_fixtures.member(
        0.0, 0.0, valid_ppl=240.1)], "Fig. 8")
    run, rerun = (report_fixtures.sweep("fig10", "Fig. 10",
                                        {"valid_ppl": 9.0})[0],
                  report_fixtures.run("fig10_again", [
                      report_fixtures.member(100.0, k, valid_ppl=v)
                      for k, v in ((0.0, 240.6), (1.0, 248.4))],
                                      "Fig. 10"))
    self.assertGreater(0.8, 3.2 * rel * 240.8)     # beyond Fig. 6's floor
    ev = report_fixtures.evidence_of(runs + fig8 + [fig8_again, run],
                                     [rerun])
    text = _text(ev)
    self.assertIn("indicative (one seed), reversed in 1; undetermined in 1 "
                  "(1 held to other architectures' noise);", text)
    self.assertIn("1 cell on 1 distinct no-LocATER member (2 trained: a "
                  "member trained twice counts once)", text)
    [none] = [v for v in ev.verdicts if v.kind == "none" and v.claim == "D"]
    self.assertEqual(none.base, 240.0)     # the copy of the run listed first
    [v] = [v for v in ev.verdicts if (v.label, v.claim, v.kind)
           == ("Fig. 8", "D", "kappa2")]
    self.assertEqual(answer.short(v.test, v.kind), "undet.†")
    self.assertEqual(answer.full(v.test, v.kind), "undetermined; held to "
                     "other architectures' noise")
    self.assertRegex(answer.evidence(v.test), r"^\+0\.8 vs floor [0-9.]+ "
                     r"\(Fig\. 10 rerun; lowest [0-9.]+\), 1 seed$")


class StripeLineTest(absltest.TestCase):

  def _ev(self, **verdict):
    v = stripes.StripeVerdict(
        label="Fig. 7", reading="mean_loss", locater=(1, 1), without=(1, 1),
        kept=True, steps=50_000, p_values=(0.005, 0.005), **verdict)
    item = backlog.Item(what="Fig. 7 with the rho maps kept", figures=("7",),
                        commands=("python launch/train.py --config "
                                  "configs/rho_training.py:both_readings",),
                        minutes=3.0)
    return dataclasses.replace(
        report_fixtures.evidence_of([]), stripes=(v,),
        backlog=backlog.Backlog(items=(item,), device="H200", slower=()))

  def test_the_superseded_test_leaves_it_undetermined_citing_the_rerun(self):
    text = _text(self._ev(verdict=stripes.UNDECIDED, earlier=True))
    self.assertIn("- **Stripes in rho_i (Fig. 7): undetermined from the "
                  "records.** literal (mean_loss): stripes in 1 of 1 "
                  "LocATER map and 1 of 1 without.", text)
    self.assertIn("it cannot tell stripes in both maps from stripes in "
                  "neither", text)
    self.assertIn("decides on the maps of `python launch/train.py --config "
                  "configs/rho_training.py:both_readings` (item 1 under "
                  "\"Still to run\").", text)

  def test_maps_give_the_shift_test_s_verdict(self):
    text = _text(self._ev(verdict="reproduced", earlier=False))
    self.assertIn("(Fig. 7): reproduced.**", text)
    self.assertIn("By the shift test (qkspec/report/stripes.py); the rho "
                  "maps are not in the records", text)
    self.assertNotIn("superseded", text)


class CountsTest(absltest.TestCase):

  def test_ranks_and_marks(self):
    def test(verdict, diff=1.0, here=True):
      return rv.Test(verdict=verdict, diff=diff, sign=-1, n=1, minimal=0.1,
                     floor=0.5, lowest=0.2, here=here)
    tests = [test(rs.NO_EFFECT), test(rs.UNDETERMINED, here=False),
             test(rs.INDICATIVE), test(rs.INDICATIVE, diff=-1.0,
                                       here=False)]
    self.assertEqual(answer.counts(tests, "kappa2"),
                     "indicative (one seed), as the paper in 1 (1 held to "
                     "other architectures' noise); indicative (one seed), "
                     "reversed in 1; undetermined in 1 (1 held to other "
                     "architectures' noise); no practical effect in 1")


if __name__ == "__main__":
  absltest.main()
