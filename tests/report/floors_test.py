"""Tests for qkspec.report.floors: what a one-seed verdict is held to."""
import math

from absl.testing import absltest
import numpy as np

from qkspec.report import floors
from qkspec.report import stats as rs
from qkspec.report import verdicts as rv
import report_fixtures


def _run(run_dir, ppl, label="Fig. 10", layers=6, d=32, reading="mean_loss"):
  """A loaded run whose members (kappa2 = 0, 1, ...) end at `ppl`."""
  members = [dict(seed=0, kappa1=100.0, kappa2=k, target=1.0,
                  last_step=50_000, metrics={
                      "valid/ppl": ([50_000], [p]),
                      "mean/entropy": ([50_000], [2.9]),
                      "mean/qk_scale": ([50_000], [0.002])})
             for k, p in zip((0.0, 1.0, 0.1), ppl)]
  return dict(run_dir=run_dir, label=label, reading=reading,
              num_layers=layers, d_model=d, members=members)


def _fig(label, layers, d, d_ppl, seeds=(0,)):
  rows = [report_fixtures.seed_row(k, {"valid_ppl": d_ppl if k else 0.0},
                                   label=label, seeds=list(seeds))
          for k in (0.0, 1.0)]
  for r in rows:
    r.update(num_layers=layers, d_model=d)
  return rows


def _fig6():
  return _fig("Fig. 6", 1, 128, [0.5, 0.3, 0.7, 0.5], seeds=(0, 1, 2, 3))


class RerunReferenceTest(absltest.TestCase):

  def test_rms_of_the_members_relative_changes(self):
    run = _run("fig10", (240.0, 241.0, 242.0))
    rerun = _run("fig10_again", (240.12, 240.82, 242.0))
    refs = floors.rerun_reference([run], [rerun])
    ref = refs[(6, 32), "mean_loss", "valid_ppl"]
    r = [0.12 / 240.12, 0.18 / 241.0, 0.0]
    self.assertAlmostEqual(ref["rel"], math.sqrt(np.mean(np.square(r))))
    self.assertEqual((ref["n"], ref["dof"], ref["label"], ref["source"]),
                     (3, 3, "Fig. 10", "rerun"))
    self.assertAlmostEqual(refs[(6, 32), "mean_loss", "entropy"]["rel"], 0.0)
    # only twins count: another reading, or a rerun stopped elsewhere
    self.assertEqual(floors.rerun_reference(
        [run], [_run("x", (1, 1, 1), reading="summed_loss")]), {})

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


class OneSeedTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.seed = dict(rel=0.0002, n=4, dof=3, label="Fig. 6", arch=(1, 128),
                     source="seeds")
    self.rerun = dict(rel=0.0005, n=5, dof=5, label="Fig. 10",
                      arch=(6, 32), source="rerun")

  def test_the_larger_floor_decides_on_each_side(self):
    refs = [dict(self.seed), dict(self.rerun)]
    seed_floor = rs.one_seed_floor(0.0002, 3, 240.0, 240.0)
    rerun_floor = rs.one_seed_floor(0.0005, 5, 240.0, 240.0)
    self.assertLess(seed_floor, rerun_floor)
    between = floors.one_seed((seed_floor + rerun_floor) / 2, refs, 240.0,
                              240.0)
    self.assertFalse(between["significant"])
    self.assertEqual(between["floor_ref"]["source"], "rerun")
    self.assertGreater(between["p"], 0.05)
    beyond = floors.one_seed(1.05 * rerun_floor, refs, 240.0, 240.0)
    self.assertTrue(beyond["significant"])
    self.assertLess(beyond["p"], 0.05)
    self.assertAlmostEqual(
        floors.one_seed(rerun_floor, refs, 240.0, 240.0)["p"], 0.05)

  def test_transferred_only_without_a_rerun_on_another_architecture(self):
    seed_ref = {("mean_loss", "kappa2", "valid_ppl"): self.seed}
    reruns = {((6, 32), "mean_loss", "valid_ppl"): self.rerun}
    for arch, reruns_, want in (((1, 128), {}, False),     # Fig. 6's own
                                ((3, 32), reruns, True),   # no rerun there
                                ((6, 32), reruns, False),  # measured there
                                ((6, 32), {}, True)):
      refs = floors.references(seed_ref, reruns_, arch, "mean_loss",
                               "kappa2", "valid_ppl")
      self.assertEqual(any(r["transferred"] for r in refs), want, arch)

  def test_verdicts_take_the_architecture_s_rerun(self):
    rows = (_fig6() + _fig("Fig. 10", 6, 32, 0.8)
            + _fig("Fig. 9", 3, 32, 0.8))
    # Fig. 6's floor: t_3 x 0.163 ppl ~ 0.52; Fig. 10's rerun: t_5 x 0.002
    # x 240 ~ 1.2
    reruns = {((6, 32), "mean_loss", "valid_ppl"): dict(self.rerun,
                                                         rel=0.002)}
    vs = {v["label"]: v for v in rv.verdicts(rows, reruns=reruns)
          if v["claim"] == "D"}
    self.assertEqual(vs["Fig. 10"]["verdict"], rs.NOT_SIGNIFICANT)
    self.assertEqual(vs["Fig. 10"]["floor_ref"]["source"], "rerun")
    self.assertFalse(vs["Fig. 10"]["transferred"])
    self.assertEqual(vs["Fig. 9"]["verdict"], rs.INDICATIVE)  # seed floor
    self.assertTrue(vs["Fig. 9"]["transferred"])
    self.assertEqual(rv.short(vs["Fig. 9"]), "(**rev.**)†")


class ContrastTest(absltest.TestCase):

  def test_none_is_held_against_kappa2_1_not_the_strongest(self):
    rows = [report_fixtures.seed_row(k, {}) for k in (0.0, 1.0, 1000.0)]
    rows.append(report_fixtures.seed_row(0.0, {}, kappa1=0.0))
    kinds = {kind: (b["kappa2"], a["kappa2"])
             for kind, b, a in floors.contrast_pairs(rows)}
    self.assertEqual(kinds, {"kappa2": (0.0, 1.0), "none": (0.0, 1.0)})
    kinds = dict((kind, a["kappa2"]) for kind, _, a in
                 floors.contrast_pairs([rows[0], rows[2], rows[3]]))
    self.assertEqual(kinds, {"none": 1000.0})


if __name__ == "__main__":
  absltest.main()
