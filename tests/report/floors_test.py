"""Tests for qkspec.report.floors: the noise the records measure, and what a
one-seed verdict is held to. The floors below are computed by hand."""
import math

from absl.testing import absltest
import numpy as np
from scipy import stats

from qkspec.report import floors
from qkspec.report import stats as rs
import report_fixtures

_FIG6_PPL = [0.5, 0.3, 0.7, 0.5]       # kappa2 1 - 0 over Fig. 6's seeds


def _fig6(reading="mean_loss"):
  """Fig. 6 with 4 seeds, its kappa2 = 1 perplexity moved by _FIG6_PPL."""
  runs = []
  for seed, d in enumerate(_FIG6_PPL):
    runs += report_fixtures.sweep(f"fig6_s{seed}", "Fig. 6",
                                  {"valid_ppl": d}, seed=seed,
                                  readings=(reading,))
  return runs


def _fig10_rerun(moves=(0.12, -0.18)):
  """Fig. 10 (L = 6, d = 32) and its rerun, whose kappa2 = 0 and 1
  perplexities move by `moves`."""
  run = report_fixtures.sweep("fig10", "Fig. 10", {"valid_ppl": 1.0})[0]
  rerun = report_fixtures.run("fig10_again", [
      report_fixtures.member(m["kappa1"], m["kappa2"],
                             valid_ppl=m["final"]["valid_ppl"] + move)
      for m, move in zip(run.members, moves)], "Fig. 10")
  return run, rerun


def _fig6_floor_rel():
  """Fig. 6's paired spread, relative to the level of each seed's pair."""
  level = np.mean([240.0 * (1 + 0.01 * s) + d
                   for s, d in enumerate(_FIG6_PPL)])
  return np.std(_FIG6_PPL, ddof=1) / level


def _fig10_rerun_rel(moves=(0.12, -0.18)):
  """The RMS of the rerun members' relative changes, by hand."""
  after = [240.0 + moves[0], 241.0 + moves[1]]
  before = [240.0, 241.0]
  return math.sqrt(np.mean([((a - b) / max(a, b)) ** 2
                            for a, b in zip(after, before)]))


class RerunReferenceTest(absltest.TestCase):

  def test_rms_of_the_members_relative_changes(self):
    run, rerun = _fig10_rerun()
    refs = floors.rerun_references(floors.pairs([run], [rerun]))
    ref = refs[(6, 32), "mean_loss", "valid_ppl"]
    self.assertAlmostEqual(ref.rel, _fig10_rerun_rel())
    self.assertEqual((ref.n, ref.dof, ref.label, ref.source),
                     (2, 2, "Fig. 10", "rerun"))
    self.assertAlmostEqual(refs[(6, 32), "mean_loss", "entropy"].rel, 0.0)
    # only twins count: another reading, or a rerun stopped elsewhere
    other = report_fixtures.run("x", [report_fixtures.member(100.0, 0.0)],
                                "Fig. 10", reading="summed_loss")
    short = report_fixtures.run("y", [report_fixtures.member(
        100.0, 0.0, step=20_000)], "Fig. 10")
    self.assertEqual(floors.pairs([run], [other, short]), [])

  def test_two_figures_of_one_architecture_are_refused(self):
    # Figs. 6 and 7 share (1, 128): one reference per architecture and
    # reading would keep one figure's reruns and drop the other's
    runs, reruns = [], []
    for label in ("Fig. 6", "Fig. 7"):
      runs.append(report_fixtures.run(label, [
          report_fixtures.member(100.0, 0.0)], label))
      reruns.append(report_fixtures.run(label + " again", [
          report_fixtures.member(100.0, 0.0, valid_ppl=241.0)], label))
    with self.assertRaisesRegex(ValueError, r"Fig\. 6.*Fig\. 7"):
      floors.rerun_references(floors.pairs(runs, reruns))
    self.assertLen(floors.rerun_references(floors.pairs(runs[:1],
                                                        reruns[:1])), 3)

  def test_a_paired_difference_moves_by_sqrt2_a_member(self):
    """Independent member changes of sd s move a paired difference by
    sqrt(2) s: the RMS of the members' changes estimates that."""
    rng = np.random.default_rng(0)
    s, n = 0.1, 20_000
    a, b = rng.normal(0, s, (2, n)), rng.normal(0, s, (2, n))
    paired = (a[0] - b[0]) - (a[1] - b[1])      # d - d' of two runs
    members = np.concatenate([a[0] - a[1], b[0] - b[1]])
    self.assertAlmostEqual(np.std(paired) / np.sqrt(2),
                           np.sqrt(np.mean(members ** 2)), delta=0.003)


class SeedReferenceTest(absltest.TestCase):

  def test_the_paired_spread_of_the_figure_with_the_most_seeds(self):
    ev = report_fixtures.evidence_of(_fig6())
    ref = ev.seed_refs["mean_loss", "kappa2", "valid_ppl"]
    self.assertAlmostEqual(ref.rel, _fig6_floor_rel())
    self.assertEqual((ref.n, ref.dof, ref.paired, ref.arch),
                     (4, 3, True, (1, 128)))

  def test_none_without_paired_seeds_takes_sqrt2_the_locater_spread(self):
    groups = [report_fixtures.seed_group(k, {"valid_ppl": [0.5, 0.3, 0.7]
                                             if k else 0.0}, seeds=[0, 1, 2])
              for k in (0.0, 1.0)]
    groups.append(report_fixtures.seed_group(0.0, {}, kappa1=0.0,
                                             label="Fig. 8"))
    groups.append(report_fixtures.seed_group(1.0, {}, label="Fig. 8"))
    ref = floors.seed_references(report_fixtures.cells_of(groups))[
        "mean_loss", "none", "valid_ppl"]
    alt = groups[1]
    self.assertFalse(ref.paired)
    self.assertAlmostEqual(ref.rel, math.sqrt(2) * alt.std["valid_ppl"]
                           / alt.mean["valid_ppl"])


class OneSeedFloorTest(absltest.TestCase):
  """A one-seed cell of Fig. 8 (L = 1, d = 32, no noise measured there),
  base 240 ppl, held to Fig. 6's seed spread (t_3 x rel, per unit of
  max(|base|, |alt|)) and to Fig. 10's rerun (t_2 x rel, 2 member pairs),
  the noisier."""

  SEED = stats.t.ppf(0.975, 3) * _fig6_floor_rel()
  RERUN = stats.t.ppf(0.975, 2) * _fig10_rerun_rel()

  def _test(self, x):
    """The verdict's numbers on d = x (240 + d), x a floor per unit."""
    d = 240.0 * x / (1 - x)
    run, rerun = _fig10_rerun()
    fig8 = report_fixtures.sweep("fig8", "Fig. 8", {"valid_ppl": d})
    ev = report_fixtures.evidence_of(_fig6() + [run] + fig8, [rerun])
    [v] = [v for v in ev.verdicts if (v.label, v.claim) == ("Fig. 8", "D")]
    return v.test, 240.0 + d

  def test_beyond_every_floor_beyond_some_below_all(self):
    self.assertLess(self.SEED, self.RERUN)      # the rerun is the noisier
    for x, verdict in ((0.9 * self.SEED, rs.NOT_SIGNIFICANT),
                       ((self.SEED + self.RERUN) / 2, rs.UNDETERMINED),
                       (1.1 * self.RERUN, rs.INDICATIVE)):
      t, level = self._test(x)
      self.assertEqual(t.verdict, verdict, (x, t))
      self.assertAlmostEqual(t.floor, self.RERUN * level)
      self.assertAlmostEqual(t.lowest, self.SEED * level)
      self.assertEqual((t.ref.label, t.ref.source), ("Fig. 10", "rerun"))
      self.assertFalse(t.here)           # none measured on Fig. 8's

  def test_the_p_value_is_the_largest_floor_s(self):
    t, _ = self._test(self.RERUN)                 # at the rerun floor
    self.assertAlmostEqual(t.p, 0.05, places=6)


class CandidatesTest(absltest.TestCase):

  def test_every_architecture_s_rerun_of_the_reading(self):
    seed = floors.Reference(rel=2e-4, n=4, dof=3, label="Fig. 6",
                            arch=(1, 128), source="seeds")
    rerun = floors.Reference(rel=5e-4, n=5, dof=5, label="Fig. 10",
                             arch=(6, 32), source="rerun")
    other = floors.Reference(rel=9e-4, n=5, dof=5, label="Fig. 8",
                             arch=(1, 32), source="rerun")
    held = floors.candidates(
        {("mean_loss", "kappa2", "valid_ppl"): seed},
        {((6, 32), "mean_loss", "valid_ppl"): rerun,
         ((1, 32), "summed_loss", "valid_ppl"): other})
    self.assertEqual(held["mean_loss", "kappa2", "valid_ppl"], (seed, rerun))
    self.assertEqual(held["mean_loss", "none", "valid_ppl"], (rerun,))
    self.assertEqual(held["summed_loss", "kappa2", "valid_ppl"], (other,))


def _finals(run_dir, finals, seed=0, step=50_000, reading="mean_loss"):
  """A Fig. 6 run: kappa2 -> (valid ppl, entropy) at its last step."""
  return report_fixtures.run(run_dir, [report_fixtures.member(
      100.0, k, seed, step=step, reading=reading, valid_ppl=ppl,
      entropy=ent) for k, (ppl, ent) in finals.items()], reading=reading)


class SpreadTest(absltest.TestCase):
  """The largest relative difference |a - b| / mean(|a|, |b|) of a rerun."""

  def test_largest_relative_difference_over_the_twin_members(self):
    run = _finals("a", {0.0: (200.0, 2.0), 1.0: (100.0, 3.0)})
    rep = _finals("b", {0.0: (201.0, 2.0), 1.0: (100.5, 3.003)})
    s = floors.spread(floors.pairs([run], [rep]))
    self.assertAlmostEqual(s["valid_ppl"]["rel"], 1.0 / 200.5)
    self.assertEqual(s["valid_ppl"]["n"], 2)
    self.assertIn("`a` vs `b`, kappa1 = 100, kappa2 = 0, seed 0",
                  s["valid_ppl"]["where"])
    self.assertAlmostEqual(s["entropy"]["rel"], 0.003 / 3.0015)
    self.assertIn("kappa2 = 1,", s["entropy"]["where"])

  def test_only_the_same_seed_reading_and_length_pair(self):
    run = _finals("a", {0.0: (200.0, 2.0)})
    for other in (_finals("b", {0.0: (300.0, 2.0)}, seed=1),
                  _finals("b", {0.0: (300.0, 2.0)}, reading="summed_loss"),
                  _finals("b", {0.0: (300.0, 2.0)}, step=20_000)):
      self.assertEmpty(floors.pairs([run], [other]))

  def test_merge_keeps_the_largest_and_counts_every_pair(self):
    a = {"valid_ppl": dict(rel=0.01, where="a", n=2),
         "entropy": dict(rel=0.002, where="a", n=2)}
    b = {"valid_ppl": dict(rel=0.03, where="b", n=1),
         "scale": dict(rel=0.5, where="b", n=1)}
    m = floors.merge(a, b)
    self.assertEqual(m["valid_ppl"], dict(rel=0.03, where="b", n=3))
    self.assertEqual(m["entropy"], a["entropy"])
    self.assertEqual(m["scale"], b["scale"])
    self.assertEqual(floors.merge(), {})
    self.assertEqual(a["valid_ppl"]["n"], 2)      # inputs left as they were

  def test_each_reading_its_own_pairs_and_kept_spreads(self):
    """The literal reading's scale-sized values move by percents between
    reruns: no floor for the fairseq reading's; a spread kept alone counts
    for its own reading only."""
    runs = [_finals("a", {0.0: (200.0, 2.0)}),
            _finals("f", {0.0: (200.0, 2.0)}, reading="summed_loss")]
    reps = [_finals("b", {0.0: (210.0, 2.0)}),
            _finals("g", {0.0: (201.0, 2.0)}, reading="summed_loss")]
    kept = ("summed_loss", "kept", {"entropy": dict(rel=0.5, where="k",
                                                    n=2)})
    s = floors.by_reading(floors.pairs(runs, reps), [kept])
    self.assertEqual(sorted(s), ["mean_loss", "summed_loss"])
    self.assertAlmostEqual(s["mean_loss"]["valid_ppl"]["rel"], 10 / 205)
    self.assertAlmostEqual(s["summed_loss"]["valid_ppl"]["rel"], 1 / 200.5)
    self.assertEqual(s["summed_loss"]["entropy"], dict(rel=0.5, where="k",
                                                       n=3))
    self.assertEqual(s["mean_loss"]["entropy"]["n"], 1)
    self.assertEqual(sorted(floors.by_reading(floors.pairs(runs, reps[:1]))),
                     ["mean_loss"])

  def test_what_each_rerun_compares(self):
    run = report_fixtures.run("a", [report_fixtures.member(
        100.0, k, valid_ppl=200.0 + k) for k in (0.0, 0.1, 1.0)],
                              record=dict(command="c", commit="0efd96a"))
    rep = report_fixtures.run("b", [report_fixtures.member(
        100.0, k, valid_ppl=201.0 + k) for k in (0.0, 1.0)],
                              record=dict(command="c", commit="a92dd90"))
    kept = ("mean_loss", "c", {"entropy": dict(rel=0.5, where="k", n=2)})
    found = floors.pairs([run], [rep])
    [r, alone] = floors.reruns([run, rep], found, [kept])
    self.assertEqual((r.replicate, r.twin, r.pairs, r.members, r.commits),
                     ("b", "a", 2, (2, 3), ("a92dd90", "0efd96a")))
    self.assertEqual(r.one_way, ())         # two pairs say nothing of a way
    self.assertEqual((alone.replicate, alone.twin, alone.pairs),
                     ("c", None, 2))


if __name__ == "__main__":
  absltest.main()
