"""Tests for qkspec.report.run_cells: runs read, merged and rebuilt."""
import json

from absl.testing import absltest
import numpy as np

from configs import depth_width
from configs import locater_wt2
from configs import rho_training
from qkspec.config import defaults
from qkspec.config import schema
from qkspec.records import rundir
from qkspec.records import store
from qkspec.report import floors
from qkspec.report import run_cells
from qkspec.report import verdicts
from qkspec.training import sweep
import report_fixtures
import testutil


class FigureOrderTest(absltest.TestCase):

  def test_figures_in_numeric_order(self):
    self.assertEqual(
        sorted(["Fig. 10", "Fig. 6 (smoke)", "Fig. 9", "Fig. 6", "Fig. 12"],
               key=run_cells.label_order),
        ["Fig. 6", "Fig. 6 (smoke)", "Fig. 9", "Fig. 10", "Fig. 12"])


def _member(seed, kappa2, steps, values, key="mean/entropy"):
  return dict(seed=seed, kappa1=100.0, kappa2=kappa2, target=1.0,
              metrics={key: (np.asarray(steps), np.asarray(values, float))})


class SeedMeanTest(absltest.TestCase):

  def test_seeds_average_at_common_steps_and_kappa2_stays_apart(self):
    members = [_member(0, 0.0, [0, 10, 20], [1.0, 2.0, 3.0]),
               _member(1, 0.0, [0, 10], [3.0, 4.0]),       # stopped early
               _member(0, 1.0, [0, 10], [5.0, 6.0])]
    merged = {m["kappa2"]: m for m in run_cells.seed_mean(members)}
    self.assertEqual(sorted(merged), [0.0, 1.0])
    steps, vals = merged[0.0]["metrics"]["mean/entropy"]
    np.testing.assert_array_equal(steps, [0, 10])
    np.testing.assert_allclose(vals, [2.0, 3.0])
    self.assertEqual((merged[0.0]["n_seeds"], merged[1.0]["n_seeds"]), (2, 1))
    np.testing.assert_allclose(merged[1.0]["metrics"]["mean/entropy"][1],
                               [5.0, 6.0])

  def test_misaligned_steps_are_not_averaged(self):
    members = [_member(0, 0.0, [0, 10], [1.0, 2.0]),
               _member(1, 0.0, [0, 20], [3.0, 4.0])]
    self.assertEqual(run_cells.seed_mean(members)[0]["metrics"], {})


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


class SeedArgumentTest(absltest.TestCase):

  def test_one_seed_alone_and_the_command_rebuilds(self):
    for module, arg in ((locater_wt2, "seed=2,fairseq"),
                        (depth_width, "L=3,d=32,seed=2,fairseq"),
                        (rho_training, "seed=2,fairseq")):
      c = module.get_config(arg)
      schema.validate(c)
      self.assertEqual({m["seed"] for m in sweep.members(c)}, {2}, arg)
      command = run_cells.config_command(json.loads(c.to_json()), "/tmp/w")
      self.assertIn(f":{arg} --workdir", command)       # no overrides
      with self.assertRaisesRegex(ValueError, "give one"):
        module.get_config(arg.replace("seed=2", "seed=2,seeds=3"))
    self.assertEqual(locater_wt2.get_config().seed, 0)


class MergedRunsTest(absltest.TestCase):

  def test_separate_seed_runs_merge_and_a_seed_counts_once(self):
    # s01: seeds=2 in one program; s1: seed=1 again, counted once; s2:
    # seed=2 alone
    runs = [report_fixtures.loaded_run("s01", (0, 1), 50_000),
            report_fixtures.loaded_run("s1", (1,), 50_000),
            report_fixtures.loaded_run("s2", (2,), 50_000),
            report_fixtures.loaded_run("other", (0,), 50_000, label="Fig. 8")]
    rows = [r for r in run_cells.summarize_runs(runs)
            if r["label"] == "Fig. 6"]
    self.assertLen(rows, 2)                       # kappa2 = 0 and 1
    for r in rows:
      self.assertEqual(r["seeds"], [0, 1, 2])
      self.assertEqual(r["run_dirs"], ["s01", "s2"])
      self.assertEqual(r["entropy_values"], [r["kappa2"] + s for s in
                                             (0, 1, 2)])
      self.assertAlmostEqual(r["entropy_mean"], r["kappa2"] + 1.0)
      self.assertAlmostEqual(r["entropy_std"], 1.0)

  def test_values_follow_the_sorted_seeds_whatever_the_run_order(self):
    runs = [report_fixtures.loaded_run("b_seed2", (2,), 50_000),
            report_fixtures.loaded_run("a_seed0", (0,), 50_000),
            report_fixtures.loaded_run("c_seed1", (1,), 50_000)]
    for r in run_cells.summarize_runs(runs):
      self.assertEqual(r["seeds"], [0, 1, 2])
      self.assertEqual(r["entropy_values"], [r["kappa2"] + s for s in
                                             (0, 1, 2)])
      self.assertEqual(floors.seed_values(r, "entropy"),
                       {s: r["kappa2"] + s for s in (0, 1, 2)})

  def test_a_no_locater_member_counts_for_both_readings(self):
    sweep = report_fixtures.loaded_run("fig9_fairseq", (0,), 50_000,
                                       label="Fig. 9")
    sweep["reading"] = "summed_loss"
    none = report_fixtures.loaded_run("fig9_none", (0,), 50_000, kappa2=(0.0,),
                                      label="Fig. 9")
    none["members"][0]["kappa1"] = 0.0
    by_cell = run_cells.cells([sweep, none])
    self.assertEqual([r["run_dir"] for r in by_cell["Fig. 9", "summed_loss"]],
                     ["fig9_fairseq", "fig9_none"])
    view = by_cell["Fig. 9", "summed_loss"][1]
    self.assertEqual(view["shared_from"], "mean_loss")
    self.assertNotIn("shared_from", by_cell["Fig. 9", "mean_loss"][0])
    # in the fairseq cell the member is the cell's reading (a figure's
    # legend names no reading), and its own run keeps its own
    none["members"][0]["penalty_added_to"] = "mean_loss"  # as members.json
    for m in sweep["members"]:
      m["penalty_added_to"] = "summed_loss"
    by_cell = run_cells.cells([sweep, none])
    view = by_cell["Fig. 9", "summed_loss"][1]
    self.assertEqual(view["members"][0]["penalty_added_to"], "summed_loss")
    self.assertEqual(none["members"][0]["penalty_added_to"], "mean_loss")
    self.assertEqual(rundir.varying_fields(
        sweep["members"] + view["members"]), ["kappa1", "kappa2"])
    fairseq = [r for r in run_cells.summarize_runs([sweep, none])
               if r["reading"] == "summed_loss"]
    self.assertEqual(sorted((r["kappa1"], r["kappa2"]) for r in fairseq),
                     [(0.0, 0.0), (100.0, 0.0), (100.0, 1.0)])
    vs = verdicts.verdicts(fairseq)
    self.assertTrue(any(v["kind"] == "none" for v in vs))
    # a LocATER member is never shared: the readings differ there
    self.assertNotIn(("Fig. 6", "summed_loss"),
                     run_cells.cells([report_fixtures.loaded_run("fig6", (0,),
                                                            50_000)]))

  def test_a_seed_stopped_early_is_left_out_not_averaged(self):
    runs = [report_fixtures.loaded_run("s0", (0,), 50_000),
            report_fixtures.loaded_run("s1", (1,), 20_000)]
    counted, left_out = run_cells.cell_members(runs)
    self.assertEqual({m["seed"] for m in counted}, {0})
    self.assertEqual({(m["seed"], m["last_step"]) for m in left_out},
                     {(1, 20_000)})
    rows = run_cells.summarize_runs(runs)
    self.assertEqual([r["n_seeds"] for r in rows], [1, 1])


class CommittedRecordsTest(absltest.TestCase):

  def test_fig7_members_are_fig6_seed_0_trained_again(self):
    """Fig. 7's LocATER member (kappa1 = 100, kappa2 = 1) is Fig. 6's of
    the same reading and seed: its final values sit within rerun noise of
    the Fig. 6 record of seed 0 and far from every other seed's."""
    rows = run_cells.summarize(store.listed(testutil.ROOT / "reproduction"
                                            / "records"))
    for reading in run_cells.READINGS:
      [fig7] = [r for r in rows if r["label"] == "Fig. 7" and r["kappa1"]
                and r["reading"] == reading]
      [fig6] = [r for r in rows if r["label"] == "Fig. 6" and r["kappa2"]
                == 1.0 and r["reading"] == reading]
      self.assertEqual(fig7["seeds"], [0])
      for name in ("valid_ppl", "test_ppl", "entropy"):
        value = fig7[f"{name}_values"][0]
        distance = {s: abs(v - value) / value for s, v in
                    floors.seed_values(fig6, name).items()}
        self.assertLess(distance[0], 2e-4, (reading, name, distance))
        if name != "valid_ppl":       # seeds 0 and 1 tie there (literal)
          self.assertEqual(min(distance, key=distance.get), 0,
                           (reading, name, distance))


class NoneArgumentTest(absltest.TestCase):

  def test_the_no_locater_member_alone_and_the_command_rebuilds(self):
    for module, arg, fig in ((depth_width, "L=3,d=32,none,seed=1", "9"),
                             (locater_wt2, "none,fairseq", "6")):
      c = module.get_config(arg)
      schema.validate(c)
      [member] = sweep.members(c)
      self.assertEqual((member["kappa1"], member["kappa2"]), (0.0, 0.0))
      config = json.loads(c.to_json())
      self.assertEqual(run_cells.figure_of(config), (fig, False))
      self.assertIn(f":{arg.replace('none,seed=1', 'seed=1,none')} "
                    "--workdir", run_cells.config_command(config, "/tmp/w"))
    two = depth_width.get_config("L=3,d=32,none,seeds=2")
    self.assertEqual([(m["seed"], m["kappa1"]) for m in sweep.members(two)],
                     [(0, 0.0), (1, 0.0)])
    with self.assertRaisesRegex(ValueError, "give one"):
      depth_width.get_config("L=3,d=32,none,contrast")

  def test_a_swept_tuple_is_passed_quoted_whatever_its_length(self):
    config = json.loads(locater_wt2.get_config().to_json())
    for target, flag in (([0.5], '"(0.5,)"'), ([0.5, 1.0], '"(0.5, 1.0)"')):
      config["sweep"]["target"] = target
      self.assertIn(f" --config.sweep.target={flag} ",
                    run_cells.config_command(config, "/tmp/w"))


class Kappa2ArgumentTest(absltest.TestCase):

  def test_other_kappa2_train_and_the_command_rebuilds(self):
    for module, arg in ((locater_wt2, "kappa2=10,100,1000,seeds=3,"
                         "both_readings"),
                        (depth_width, "L=6,d=32,kappa2=0,1,seed=1,contrast")):
      c = module.get_config(arg)
      schema.validate(c)
      kappa2 = {m["kappa2"] for m in sweep.members(c) if m["kappa1"] > 0}
      self.assertEqual(kappa2, {10.0, 100.0, 1000.0} if "seeds" in arg
                       else {0.0, 1.0})
      command = run_cells.config_command(json.loads(c.to_json()), "/tmp/w")
      self.assertIn(f":{arg} --workdir", command)        # no overrides


class ContrastArgumentTest(absltest.TestCase):

  def test_one_no_locater_member_per_seed_and_the_command_rebuilds(self):
    c = depth_width.get_config("L=3,d=32,seeds=2,contrast")
    schema.validate(c)
    members = sweep.members(c)
    self.assertLen(members, 12)
    for seed in (0, 1):
      pairs = [(m["kappa1"], m["kappa2"]) for m in members
               if m["seed"] == seed]
      self.assertEqual(pairs, [(100.0, k) for k in defaults.KAPPA2_SWEEP]
                       + [(0.0, 0.0)])
    config = json.loads(c.to_json())
    self.assertEqual(run_cells.figure_of(config), ("9", False))
    command = run_cells.config_command(config, "/tmp/w")
    self.assertIn("--config configs/depth_width.py:L=3,d=32,seeds=2,"
                  "contrast --workdir", command)       # no overrides
    one = json.loads(depth_width.get_config("L=1,d=32,contrast").to_json())
    self.assertLen(one["sweep"]["kappa1"], 6)
    self.assertIn("configs/depth_width.py:L=1,d=32,contrast --workdir",
                  run_cells.config_command(one, "/tmp/w"))


if __name__ == "__main__":
  absltest.main()
