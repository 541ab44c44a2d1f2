"""Tests for qkspec.report.run_cells: runs read, merged into cells."""
from absl.testing import absltest

from qkspec.records import rundir
from qkspec.records import store
from qkspec.report import run_cells
import report_fixtures
import testutil


class FigureOrderTest(absltest.TestCase):

  def test_figures_in_numeric_order(self):
    self.assertEqual(
        sorted(["Fig. 10", "Fig. 6 (smoke)", "Fig. 9", "Fig. 6", "Fig. 12"],
               key=run_cells.label_order),
        ["Fig. 6", "Fig. 6 (smoke)", "Fig. 9", "Fig. 10", "Fig. 12"])
    runs = (report_fixtures.sweep("b", "Fig. 10")
            + report_fixtures.sweep("a", "Fig. 6"))
    self.assertEqual(list(run_cells.cells(runs)),
                     [("Fig. 6", "mean_loss"), ("Fig. 10", "mean_loss")])


class FigureOfTest(absltest.TestCase):

  def test_paper_figures_from_depth_and_width(self):
    for (layers, d), fig in run_cells.FIGURES.items():
      config = dict(model=dict(num_layers=layers, d_model=d),
                    data=dict(name="wikitext2"), sweep=dict(kappa1=[]))
      self.assertEqual(run_cells.figure_of(config), (fig, False))

  def test_rho_training_members_are_fig7(self):
    config = dict(model=dict(num_layers=1, d_model=16),
                  data=dict(name="synthetic"),
                  sweep=dict(kappa1=[100, 0], kappa2=[1, 0]))
    self.assertEqual(run_cells.figure_of(config), ("7", True))

  def test_a_kappa2_sweep_with_a_none_member_keeps_its_figure(self):
    config = dict(model=dict(num_layers=3, d_model=32),
                  data=dict(name="wikitext2"),
                  sweep=dict(kappa1=[100] * 5 + [0],
                             kappa2=[0, 1e-3, 1e-2, 1e-1, 1, 0]))
    self.assertEqual(run_cells.figure_of(config), ("9", False))


def _seeds(run_dir, seeds, step=50_000, label="Fig. 6"):
  """A run of kappa2 = 0 and 1 for each of `seeds`, entropy kappa2 + seed."""
  return report_fixtures.run(run_dir, [
      report_fixtures.member(100.0, k, s, step=step, entropy=k + s)
      for s in seeds for k in (0.0, 1.0)], label)


class MergedRunsTest(absltest.TestCase):

  def test_separate_seed_runs_merge_and_a_seed_counts_once(self):
    # s01: seeds=2 in one program; s1: seed=1 again, counted once; s2:
    # seed=2 alone
    runs = [_seeds("s01", (0, 1)), _seeds("s1", (1,)), _seeds("s2", (2,)),
            _seeds("other", (0,), label="Fig. 8")]
    groups = run_cells.cells(runs)["Fig. 6", "mean_loss"].groups
    self.assertLen(groups, 2)                       # kappa2 = 0 and 1
    for g in groups:
      self.assertEqual(g.seeds, (0, 1, 2))
      self.assertEqual(g.run_dirs, ("s01", "s2"))
      self.assertEqual(g.values["entropy"], tuple(g.kappa2 + s
                                                  for s in (0, 1, 2)))
      self.assertAlmostEqual(g.mean["entropy"], g.kappa2 + 1.0)
      self.assertAlmostEqual(g.std["entropy"], 1.0)

  def test_values_follow_the_sorted_seeds_whatever_the_run_order(self):
    runs = [_seeds("b_seed2", (2,)), _seeds("a_seed0", (0,)),
            _seeds("c_seed1", (1,))]
    for g in run_cells.cells(runs)["Fig. 6", "mean_loss"].groups:
      self.assertEqual(g.seeds, (0, 1, 2))
      self.assertEqual(g.values["entropy"], tuple(g.kappa2 + s
                                                  for s in (0, 1, 2)))

  def test_a_no_locater_member_counts_for_both_readings(self):
    sweep = report_fixtures.sweep("fig9_fairseq", "Fig. 9",
                                  readings=("summed_loss",))[0]
    none = report_fixtures.run("fig9_none", [report_fixtures.member(
        0.0, 0.0)], "Fig. 9")
    cells = run_cells.cells([sweep, none])
    fairseq = cells["Fig. 9", "summed_loss"]
    self.assertEqual([r.run_dir for r in fairseq.runs],
                     ["fig9_fairseq", "fig9_none"])
    view = fairseq.runs[1]
    self.assertEqual(view.shared_from, "mean_loss")
    self.assertIsNone(cells["Fig. 9", "mean_loss"].runs[0].shared_from)
    # in the fairseq cell the member is the cell's reading (a figure's
    # legend names no reading), and its own run keeps its own
    self.assertEqual(view.members[0]["penalty_added_to"], "summed_loss")
    self.assertEqual(none.members[0]["penalty_added_to"], "mean_loss")
    self.assertEqual(rundir.varying_fields(
        list(sweep.members + view.members)), ["kappa1", "kappa2"])
    self.assertEqual(sorted((g.kappa1, g.kappa2) for g in fairseq.groups),
                     [(0.0, 0.0), (100.0, 0.0), (100.0, 1.0)])
    self.assertEqual([c.kind for c in fairseq.contrasts], ["kappa2", "none"])
    # a LocATER member is never shared: the readings differ there
    self.assertNotIn(("Fig. 6", "summed_loss"),
                     run_cells.cells(report_fixtures.sweep("fig6", "Fig. 6")))

  def test_a_member_trained_twice_is_one_member(self):
    """Fig. 7's no-LocATER member trained in the literal and in the
    fairseq run (the same config and seed): both cells count the copy of
    the run listed first, once, as one seed."""
    def fig7(run_dir, reading, ppl):
      return report_fixtures.run(run_dir, [
          report_fixtures.member(100.0, 1.0, reading=reading),
          report_fixtures.member(0.0, 0.0, reading=reading, valid_ppl=ppl)],
                                 "Fig. 7", reading)
    cells = run_cells.cells([fig7("fig7", "mean_loss", 226.589),
                             fig7("fig7_fairseq", "summed_loss", 226.618)])
    for reading in run_cells.READINGS:
      [none] = [g for g in cells["Fig. 7", reading].groups if not g.locater]
      self.assertEqual(none.seeds, (0,))
      self.assertEqual(none.values["valid_ppl"], (226.589,))
      self.assertEqual(none.run_dirs, ("fig7",))
    ids = {c.base.identity for cell in cells.values()
           for c in cell.contrasts}
    self.assertLen(ids, 1)

  def test_a_seed_stopped_early_is_left_out_not_averaged(self):
    cell = run_cells.cells([_seeds("s0", (0,)), _seeds("s1", (1,), 20_000)])[
        "Fig. 6", "mean_loss"]
    self.assertEqual({m["seed"] for m in cell.counted}, {0})
    self.assertEqual({(m["seed"], m["last_step"]) for m in cell.left_out},
                     {(1, 20_000)})
    self.assertEqual([g.n_seeds for g in cell.groups], [1, 1])


class CommittedRecordsTest(absltest.TestCase):

  def test_fig7_members_are_fig6_seed_0_trained_again(self):
    """Fig. 7's LocATER member (kappa1 = 100, kappa2 = 1) is Fig. 6's of
    the same reading and seed: its final values sit within rerun noise of
    the Fig. 6 record of seed 0 and far from every other seed's."""
    cells = run_cells.cells(run_cells.load_runs(store.listed(
        testutil.ROOT / "reproduction" / "records")))
    for reading in run_cells.READINGS:
      [fig7] = [g for g in cells["Fig. 7", reading].groups if g.kappa1]
      [fig6] = [g for g in cells["Fig. 6", reading].groups
                if g.kappa2 == 1.0]
      self.assertEqual(fig7.seeds, (0,))
      for name in ("valid_ppl", "test_ppl", "entropy"):
        value = fig7.values[name][0]
        distance = {s: abs(v - value) / value for s, v in
                    zip(fig6.seeds, fig6.values[name])}
        self.assertLess(distance[0], 2e-4, (reading, name, distance))
        if name != "valid_ppl":       # seeds 0 and 1 tie there (literal)
          self.assertEqual(min(distance, key=distance.get), 0,
                           (reading, name, distance))


if __name__ == "__main__":
  absltest.main()
