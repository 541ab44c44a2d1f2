"""Tests for qkspec.report.replicates (the same-seed rerun spread)."""
from absl.testing import absltest
import numpy as np

from qkspec.report import replicates

QUANTITIES = [("valid_ppl", "valid/ppl"), ("entropy", "mean/entropy")]


def _run(run_dir, finals, seed=0, last_step=50_000, reading="mean_loss"):
  """A loaded run (`run_cells.load_runs`' form): kappa2 -> (ppl, entropy)."""
  members = [dict(kappa1=100.0, kappa2=k, target=1.0, seed=seed,
                  last_step=last_step,
                  metrics={"valid/ppl": (np.asarray([0, last_step]),
                                         np.asarray([9e9, ppl])),
                           "mean/entropy": (np.asarray([last_step]),
                                            np.asarray([ent]))})
             for k, (ppl, ent) in finals.items()]
  return dict(run_dir=run_dir, label="Fig. 6", reading=reading,
              members=members)


class SpreadTest(absltest.TestCase):

  def test_largest_relative_difference_over_the_twin_members(self):
    run = _run("a", {0.0: (200.0, 2.0), 1.0: (100.0, 3.0)})
    rep = _run("b", {0.0: (201.0, 2.0), 1.0: (100.5, 3.003)})
    s = replicates.spread([run], [rep], QUANTITIES)
    self.assertAlmostEqual(s["valid_ppl"]["rel"], 1.0 / 200.5)  # final, not 9e9
    self.assertEqual(s["valid_ppl"]["n"], 2)
    self.assertIn("`a` vs `b`, kappa1 = 100, kappa2 = 0, seed 0",
                  s["valid_ppl"]["where"])
    self.assertAlmostEqual(s["entropy"]["rel"], 0.003 / 3.0015)
    self.assertIn("kappa2 = 1,", s["entropy"]["where"])

  def test_only_the_same_seed_reading_and_length_pair(self):
    run = _run("a", {0.0: (200.0, 2.0)})
    for other in (_run("b", {0.0: (300.0, 2.0)}, seed=1),
                  _run("b", {0.0: (300.0, 2.0)}, reading="summed_loss"),
                  _run("b", {0.0: (300.0, 2.0)}, last_step=20_000)):
      self.assertEmpty(replicates.pairs([run], [other]))
      self.assertEqual(replicates.spread([run], [other], QUANTITIES), {})

  def test_merge_keeps_the_largest_and_counts_every_pair(self):
    a = {"valid_ppl": dict(rel=0.01, where="a", n=2),
         "entropy": dict(rel=0.002, where="a", n=2)}
    b = {"valid_ppl": dict(rel=0.03, where="b", n=1),
         "scale": dict(rel=0.5, where="b", n=1)}
    m = replicates.merge(a, b)
    self.assertEqual(m["valid_ppl"], dict(rel=0.03, where="b", n=3))
    self.assertEqual(m["entropy"], a["entropy"])
    self.assertEqual(m["scale"], b["scale"])
    self.assertEqual(replicates.merge(), {})
    self.assertEqual(a["valid_ppl"]["n"], 2)      # inputs left as they were

  def test_by_reading_keeps_each_readings_floor_apart(self):
    """The literal reading's scale-sized values (near 1e-6) move by
    percents between reruns: no floor for the fairseq reading's."""
    runs = [_run("a", {0.0: (200.0, 2.0)}),
            _run("f", {0.0: (200.0, 2.0)}, reading="summed_loss")]
    reps = [_run("b", {0.0: (210.0, 2.0)}),
            _run("g", {0.0: (201.0, 2.0)}, reading="summed_loss")]
    kept = {"entropy": dict(rel=0.5, where="kept", n=1)}
    s = replicates.by_reading(runs, reps, QUANTITIES, kept=[kept])
    self.assertEqual(sorted(s), ["mean_loss", "summed_loss"])
    self.assertAlmostEqual(s["mean_loss"]["valid_ppl"]["rel"], 10 / 205)
    self.assertAlmostEqual(s["summed_loss"]["valid_ppl"]["rel"], 1 / 200.5)
    for reading in s:                  # a kept spread counts for both
      self.assertEqual(s[reading]["entropy"]["rel"], 0.5)
    # a reading that was not rerun has no floor, unless a kept one is given
    alone = replicates.by_reading(runs, reps[:1], QUANTITIES,
                                  readings={"summed_loss"})
    self.assertEqual(sorted(alone), ["mean_loss"])
    self.assertEqual(sorted(replicates.by_reading(
        runs, reps[:1], QUANTITIES, {"summed_loss"}, [kept])),
                     ["mean_loss", "summed_loss"])

  def test_markdown_without_replicates_says_so(self):
    self.assertIn("no replicate runs given", replicates.markdown({}, {}))
    line = replicates.markdown({"valid_ppl": dict(rel=7.7e-4, where="a",
                                                  n=7)}, {"valid_ppl": "ppl"},
                               "literal")
    self.assertEqual(line, "- literal: ppl 0.00077 (largest relative "
                     "difference of 7 pairs)")


if __name__ == "__main__":
  absltest.main()
