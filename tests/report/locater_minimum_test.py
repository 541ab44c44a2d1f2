"""Tests for qkspec.report.locater_minimum (trained W_QK vs W*)."""
import math

from absl.testing import absltest

from qkspec.report import locater_minimum
from qkspec.report import run_cells
from qkspec.theory import locater


def _row(kappa2, trace, scale, d=8, kappa1=4.0, reading="mean_loss",
         entropy=2.8):
  return run_cells.group(
      {"trace": (trace,), "scale": (scale,), "entropy": (entropy,)},
      figure="6", smoke=False, reading=reading, run_dirs=(),
      d_model=d, num_layers=1, seq_len=64, kappa1=kappa1, kappa2=kappa2,
      target=1.0, seeds=(0,), final_step=50_000, num_steps=50_000)


class LocaterMinimumTest(absltest.TestCase):

  def test_at_the_minimum_only_when_trace_and_isotropy_agree(self):
    star = locater.penalty_minimum(4.0, 1.0, 8)        # trace 8 / 12
    t, s = float(star.trace), float(star.scale)
    rows = [_row(1.0, t, s),                  # exactly W*
            _row(1.0, t, 3 * s),              # right trace, not isotropic
            _row(1.0, 0.5 * t, s),            # isotropy fine, trace off
            _row(0.0, 0.0, 0.1),              # W* = 0: no relative test
            _row(1.0, t, s, kappa1=0.0),      # no LocATER: skipped
            _row(1.0, t, s, d=0)]             # no width: skipped
    cs = locater_minimum.compare(rows)
    self.assertLen(cs, 4)
    self.assertAlmostEqual(cs[0].isotropy, 1.0, places=5)
    self.assertAlmostEqual(cs[0].star_trace, 2 / 3, places=6)
    self.assertEqual([c.at_minimum for c in cs], [True, False, False, None])
    self.assertAlmostEqual(cs[1].isotropy, 3.0, places=5)

  def test_markdown_table_and_line(self):
    star = locater.penalty_minimum(4.0, 1.0, 8)
    rows = locater_minimum.compare([
        _row(0.0, 0.01, 0.02), _row(1.0, float(star.trace),
                                    float(star.scale))])
    md = "\n".join(locater_minimum.markdown(rows, {"mean_loss": "literal"}))
    self.assertIn("## LocATER's own minimum", md)
    self.assertIn("| Fig. 6 | literal | 8 | 1 | 0.6667 | 0.6667 | 0.05556 | "
                  "0.05556 | 1 | 1 |", md)
    self.assertEqual(locater_minimum.markdown([], {}), [])
    self.assertEqual(
        locater_minimum.target_line(rows, {"mean_loss": "literal"}),
        "tr(W_QK) never reaches its target 1: at kappa2 = 1 the trained "
        "trace is literal 0.67; the penalty alone stops at W*'s trace 0.67 "
        "(d = 8), as kappa1 = 4 pulls W_QK to 0 (section \"LocATER's own "
        "minimum\").")
    self.assertEqual(locater_minimum.target_line([], {}), "")
    self.assertEqual(locater_minimum.star_curve(rows),
                     ([0.0, 1.0], [0.0, float(star.scale)]))

  def test_the_groups_at_w_star_only(self):
    star = locater.penalty_minimum(4.0, 1.0, 8)
    rows = [_row(1.0, float(star.trace), float(star.scale)),
            _row(1.0, 0.1, 5.0, reading="summed_loss")]
    self.assertEqual(locater_minimum.at_minimum(locater_minimum.compare(rows)),
                     {("Fig. 6", "mean_loss", 4.0, 1.0)})


class BiasLineTest(absltest.TestCase):

  def test_uniform_causal_entropy_against_a_loop(self):
    for t in (1, 2, 64):
      rows = [math.log(i) for i in range(1, t + 1)]   # query i sees i keys
      self.assertAlmostEqual(locater_minimum.uniform_entropy(t),
                             sum(rows) / t)
    self.assertAlmostEqual(locater_minimum.uniform_entropy(64), 3.2058,
                           places=4)

  def test_a_reading_at_w_star_gets_the_line_one_off_it_none(self):
    star = locater.penalty_minimum(4.0, 1.0, 8)

    def rows(scale_at_1):
      return [_row(k, t, s, entropy=e)
              for k, t, s, e in ((0.0, 0.0, 3e-6, 2.82),
                                 (1.0, float(star.trace), scale_at_1, 2.83))]

    def line(groups, readings):
      return locater_minimum.bias_line(locater_minimum.compare(groups),
                                       groups, readings)
    text = line(rows(float(star.scale)), {"mean_loss": "literal"})
    self.assertIn("Under the literal reading LocATER holds W_QK = W_Q^T W_K "
                  "at its own minimum in every figure (scale 3e-06 at "
                  "kappa2 = 0, W*'s 0.056 at kappa2 = 1;", text)
    self.assertIn("the attention entropy, 2.82 to 2.83 nats, below the 3.21 "
                  "of uniform attention over T = 64 causal keys", text)
    self.assertEqual(line(rows(3 * float(star.scale)), {}), "")


if __name__ == "__main__":
  absltest.main()
