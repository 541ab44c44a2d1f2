"""Tests for qkspec.experiments.report (REPRODUCTION.md from run dirs, its
figures of differences over training)."""
import csv
import json
import math
import os
import re
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from configs import depth_width
from configs import locater_wt2
from configs import rho_training
from qkspec.config import args as args_lib
from qkspec.config import defaults
from qkspec.config import schema
from qkspec.experiments import report
from qkspec.experiments import report_claims
from qkspec.experiments import report_runs
from qkspec.experiments import report_stats
from qkspec.experiments import report_verdicts
from qkspec.experiments import training_plots
from qkspec.training import loop
from qkspec.training import sweep
import testutil



def _row(kappa2, scale, entropy, ppl, n_seeds=3, spread=0.01, kappa1=100.0):
  row = dict(figure="6", label="Fig. 6", reading="mean_loss",
             kappa1=kappa1, kappa2=kappa2, n_seeds=n_seeds)
  for name, mean in (("scale", scale), ("entropy", entropy),
                     ("valid_ppl", ppl)):
    row[f"{name}_mean"] = mean
    row[f"{name}_std"] = spread if n_seeds > 1 else math.nan
  return row


def _by_claim(vs):
  return {v["claim"]: v for v in vs}


def _run_rows(figure, reading, n_seeds, final_step, smoke=False,
              none=None):
  """Summary rows of a kappa2 = 0, 1 sweep; `none` adds a no-LocATER group
  (default: for the figures that need one)."""
  pairs = [(100.0, 0.0), (100.0, 1.0)]
  if none or (none is None and figure in report_claims.CONTRAST_FIGS):
    pairs.append((0.0, 0.0))
  return [dict(figure=figure, reading=reading, seeds=list(range(n_seeds)),
               n_seeds=n_seeds, final_step=final_step, smoke=smoke,
               kappa1=k1, kappa2=k2) for k1, k2 in pairs]


class FigureOrderTest(absltest.TestCase):

  def test_figures_in_numeric_order(self):
    self.assertEqual(
        sorted(["Fig. 10", "Fig. 6 (smoke)", "Fig. 9", "Fig. 6", "Fig. 12"],
               key=report_runs.label_order),
        ["Fig. 6", "Fig. 6 (smoke)", "Fig. 9", "Fig. 10", "Fig. 12"])

  def test_verdicts_list_fig6_before_fig10(self):
    rows = []
    for fig in ("10", "6"):
      for r in (_row(0.0, 5.0, 1.0, 200.0), _row(1.0, 3.0, 2.0, 150.0)):
        rows.append(dict(r, figure=fig, label=f"Fig. {fig}"))
    vs = report_verdicts.verdicts(rows)
    self.assertEqual([v["label"] for v in vs],
                     ["Fig. 6"] * 3 + ["Fig. 10"] * 3)


class StillToRunTest(absltest.TestCase):

  def test_lists_each_uncovered_cell_with_its_command(self):
    rows = (_run_rows("6", "mean_loss", 1, 50_000)        # 1 of 3
            + _run_rows("6", "summed_loss", 3, 11_000)    # shortened
            + _run_rows("8", "mean_loss", 1, 50_000)      # covered
            + _run_rows("9", "mean_loss", 1, 50_000, smoke=True))
    lines = report_claims.still_to_run(rows)
    # one line per reading where the readings lack different runs (Figs. 6
    # and 8), one for both where they lack the same (Figs. 7, 9-12)
    self.assertLen(lines, len(report_claims.PLAN) + 1)
    text = "\n".join(lines)
    self.assertIn("Fig. 6, literal (mean_loss): 1 of 3 seeds (seed 0 done)",
                  text)
    # the missing seeds, one run each
    self.assertIn("`python launch/train.py --config configs/locater_wt2.py:"
                  "contrast,seed=1 --workdir runs/fig6_contrast_seed1`; "
                  "`python launch/train.py --config configs/locater_wt2.py:"
                  "contrast,seed=2 --workdir runs/fig6_contrast_seed2`", text)
    self.assertIn("Fig. 6, fairseq (summed_loss): shortened: 11,000 of "
                  "50,000 steps", text)
    self.assertNotIn("Fig. 8, literal", text)
    self.assertIn("Fig. 9, both readings: not run", text)  # smoke
    self.assertIn("--config configs/locater_wt2.py:fairseq,contrast,seeds=3 "
                  "--workdir runs/fig6_fairseq_contrast_seeds3`", text)
    self.assertIn("Fig. 8, fairseq (summed_loss): not run", text)
    self.assertIn("--config configs/depth_width.py:L=1,d=32,fairseq,contrast "
                  "--workdir runs/fig8_fairseq_contrast`", text)
    self.assertIn("--config configs/rho_training.py:both_readings "
                  "--workdir runs/fig7_both_readings`", text)
    # its sweep and no-LocATER member as one program
    self.assertIn("--config configs/depth_width.py:L=3,d=32,both_readings,"
                  "contrast --workdir runs/fig9_both_readings_contrast`", text)
    self.assertNotIn("bench/", text)

  def test_every_command_loads_its_config(self):
    lines = report_claims.still_to_run(
        _run_rows("6", "mean_loss", 1, 50_000)
        + _run_rows("9", "mean_loss", 1, 50_000, none=False)
        + [dict(r, seeds=[0, 2]) for r in
           _run_rows("6", "summed_loss", 3, 50_000)])
    commands = re.findall(r"`python launch/train.py --config (\S+) "
                          r"--workdir (\S+)`", "\n".join(lines))
    # Fig. 6: 2 + 1 seeds, Figs. 7, 8, 10-12: one each, Fig. 9: 2 readings
    self.assertLen(commands, 3 + 5 + 2)
    self.assertLen({w for _, w in commands}, len(commands))   # workdirs
    for config, _ in commands:
      path, arg = config.partition(":")[::2]
      args_lib.load_config_file(testutil.ROOT / path, arg or None)

  def test_a_complete_plan_leaves_nothing(self):
    rows = [r for fig, seeds in report_claims.PLAN.items()
            for reading in report_runs.READINGS
            for r in _run_rows(fig, reading, seeds, 50_000)]
    self.assertEqual(report_claims.still_to_run(rows), [])
    rows[0]["seeds"] = [0, 2]                    # one group lacks seed 1
    [line] = report_claims.still_to_run(rows)
    self.assertIn("--config configs/locater_wt2.py:seed=1 --workdir "
                  "runs/fig6_seed1`", line)

  def test_figs_8_to_12_need_a_no_locater_member(self):
    rows = _run_rows("9", "mean_loss", 1, 50_000, none=False)
    [line] = [l for l in report_claims.still_to_run(rows)
              if l.startswith("- Fig. 9, literal")]
    self.assertIn("no-LocATER member: not run", line)
    self.assertIn("--config configs/depth_width.py:L=3,d=32,none --workdir "
                  "runs/fig9_none`", line)
    rows += [dict(rows[0], kappa1=0.0, kappa2=0.0)]        # a none run
    self.assertFalse([l for l in report_claims.still_to_run(rows)
                      if l.startswith("- Fig. 9, literal")])

  def test_fig7_shared_no_locater_member_alone_leaves_the_run_to_do(self):
    # Fig. 7 under fairseq's reading: both members; its none member is
    # also counted for the literal reading, whose LocATER member is missing.
    runs = [_run("fig7_fairseq", (0,), 50_000, kappa2=(0.0, 1.0),
                 label="Fig. 7")]
    runs[0]["reading"] = "summed_loss"
    runs[0]["members"][0]["kappa1"] = 0.0            # the none member
    rows = report_runs.summarize_runs(runs)
    self.assertIn(("mean_loss", 0.0), [(r["reading"], r["kappa1"])
                                       for r in rows])
    lines = [l for l in report_claims.still_to_run(rows) if "Fig. 7" in l]
    self.assertLen(lines, 1)
    self.assertStartsWith(lines[0], "- Fig. 7, literal (mean_loss): not run")
    self.assertIn("--config configs/rho_training.py --workdir runs/fig7`",
                  lines[0])

  def test_a_packed_run_covers_both_readings_with_its_contrast(self):
    # a run of configs/depth_width.py:L=3,d=32,both_readings,seeds=3,contrast:
    # both readings, seeds 0-2 and a no-LocATER member per seed (under the
    # literal reading) in one program, which load_runs splits into one run
    # per reading
    runs = []
    for reading in report_runs.READINGS:
      run = _run("fig9_both_c_seeds3", (0, 1, 2), 50_000,
                 kappa2=(0.0, 1e-3, 1e-2, 1e-1, 1.0), label="Fig. 9")
      if reading == "mean_loss":
        run["members"] += [dict(m, kappa1=0.0) for m in
                           _run("", (0, 1, 2), 50_000, kappa2=(0.0,))[
                               "members"]]
      runs.append(dict(run, reading=reading, both_readings=True))
    rows = report_runs.summarize_runs(runs)
    self.assertEqual({(r["reading"], r["kappa1"], r["n_seeds"])
                      for r in rows if r["kappa2"] == 0},
                     {(reading, k1, 3) for reading in report_runs.READINGS
                      for k1 in (0.0, 100.0)})
    self.assertFalse([l for l in report_claims.still_to_run(rows)
                      if l.startswith("- Fig. 9")])


def _member(seed, kappa2, steps, values, key="mean/entropy"):
  return dict(seed=seed, kappa1=100.0, kappa2=kappa2, target=1.0,
              metrics={key: (np.asarray(steps), np.asarray(values, float))})


class SeedMeanTest(absltest.TestCase):

  def test_seeds_average_at_common_steps_and_kappa2_stays_apart(self):
    members = [_member(0, 0.0, [0, 10, 20], [1.0, 2.0, 3.0]),
               _member(1, 0.0, [0, 10], [3.0, 4.0]),       # stopped early
               _member(0, 1.0, [0, 10], [5.0, 6.0])]
    merged = {m["kappa2"]: m for m in report_runs.seed_mean(members)}
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
    self.assertEqual(report_runs.seed_mean(members)[0]["metrics"], {})


class FigureOfTest(absltest.TestCase):

  def test_paper_figures_from_depth_and_width(self):
    for (layers, d), fig in report_runs.FIGURES.items():
      config = dict(model=dict(num_layers=layers, d_model=d),
                    data=dict(name="wikitext2"), sweep=dict(kappa1=[]))
      self.assertEqual(report_runs.figure_of(config), (fig, False))

  def test_rho_training_members_are_fig7(self):
    config = dict(model=dict(num_layers=1, d_model=16),
                  data=dict(name="synthetic"),
                  sweep=dict(kappa1=[100, 0], kappa2=[1, 0]))
    self.assertEqual(report_runs.figure_of(config), ("7", True))

  def test_a_kappa2_sweep_with_a_none_member_keeps_its_figure(self):
    config = dict(model=dict(num_layers=3, d_model=32),
                  data=dict(name="wikitext2"),
                  sweep=dict(kappa1=[100] * 5 + [0],
                             kappa2=[0, 1e-3, 1e-2, 1e-1, 1, 0]))
    self.assertEqual(report_runs.figure_of(config), ("9", False))


class SeedArgumentTest(absltest.TestCase):

  def test_one_seed_alone_and_the_command_rebuilds(self):
    for module, arg in ((locater_wt2, "seed=2,fairseq"),
                        (depth_width, "L=3,d=32,seed=2,fairseq"),
                        (rho_training, "seed=2,fairseq")):
      c = module.get_config(arg)
      schema.validate(c)
      self.assertEqual({m["seed"] for m in sweep.members(c)}, {2}, arg)
      command = report_runs.config_command(json.loads(c.to_json()), "/tmp/w")
      self.assertIn(f":{arg} --workdir", command)       # no overrides
      with self.assertRaisesRegex(ValueError, "give one"):
        module.get_config(arg.replace("seed=2", "seed=2,seeds=3"))
    self.assertEqual(locater_wt2.get_config().seed, 0)


def _run(run_dir, seeds, last_step, kappa2=(0.0, 1.0), label="Fig. 6"):
  """A loaded run (`report_runs.load_runs`' form) with synthetic finals."""
  members = [dict(seed=seed, kappa1=100.0, kappa2=k, target=1.0,
                  last_step=last_step,
                  metrics={"mean/entropy": (np.asarray([last_step]),
                                            np.asarray([seed + k]))})
             for seed in seeds for k in kappa2]
  return dict(run_dir=run_dir, figure=label.split()[1], smoke=False,
              label=label, reading="mean_loss", command="", members=members,
              final_step=last_step, num_steps=50_000)


class MergedRunsTest(absltest.TestCase):

  def test_separate_seed_runs_merge_and_a_seed_counts_once(self):
    runs = [_run("s01", (0, 1), 50_000),          # seeds=2 in one program
            _run("s1", (1,), 50_000),             # seed=1 again: counted once
            _run("s2", (2,), 50_000),             # seed=2 alone
            _run("other", (0,), 50_000, label="Fig. 8")]
    rows = [r for r in report_runs.summarize_runs(runs)
            if r["label"] == "Fig. 6"]
    self.assertLen(rows, 2)                       # kappa2 = 0 and 1
    for r in rows:
      self.assertEqual(r["seeds"], [0, 1, 2])
      self.assertEqual(r["run_dirs"], ["s01", "s2"])
      self.assertEqual(r["entropy_values"], [r["kappa2"] + s for s in
                                             (0, 1, 2)])
      self.assertAlmostEqual(r["entropy_mean"], r["kappa2"] + 1.0)
      self.assertAlmostEqual(r["entropy_std"], 1.0)
    rows = report_runs.summarize_runs(runs)
    self.assertIn("- Fig. 6, fairseq (summed_loss): not run", [
        line[:40] for line in report_claims.still_to_run(rows)])

  def test_a_no_locater_member_counts_for_both_readings(self):
    sweep = _run("fig9_fairseq", (0,), 50_000, label="Fig. 9")
    sweep["reading"] = "summed_loss"
    none = _run("fig9_none", (0,), 50_000, kappa2=(0.0,), label="Fig. 9")
    none["members"][0]["kappa1"] = 0.0
    by_cell = report_runs.cells([sweep, none])
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
    by_cell = report_runs.cells([sweep, none])
    view = by_cell["Fig. 9", "summed_loss"][1]
    self.assertEqual(view["members"][0]["penalty_added_to"], "summed_loss")
    self.assertEqual(none["members"][0]["penalty_added_to"], "mean_loss")
    self.assertEqual(training_plots.varying_fields(
        sweep["members"] + view["members"]), ["kappa1", "kappa2"])
    self.assertNotIn("Fig. 9", "".join(
        l for l in report_claims.still_to_run(
            report_runs.summarize_runs([sweep, none]))
        if "fairseq" in l))         # the fairseq cell is complete
    fairseq = [r for r in report_runs.summarize_runs([sweep, none])
               if r["reading"] == "summed_loss"]
    self.assertEqual(sorted((r["kappa1"], r["kappa2"]) for r in fairseq),
                     [(0.0, 0.0), (100.0, 0.0), (100.0, 1.0)])
    vs = report_verdicts.verdicts(fairseq)
    self.assertTrue(any(v["kind"] == "none" for v in vs))
    # a LocATER member is never shared: the readings differ there
    self.assertNotIn(("Fig. 6", "summed_loss"),
                     report_runs.cells([_run("fig6", (0,), 50_000)]))

  def test_a_seed_stopped_early_is_left_out_not_averaged(self):
    runs = [_run("s0", (0,), 50_000), _run("s1", (1,), 20_000)]
    counted, left_out = report_runs.cell_members(runs)
    self.assertEqual({m["seed"] for m in counted}, {0})
    self.assertEqual({(m["seed"], m["last_step"]) for m in left_out},
                     {(1, 20_000)})
    rows = report_runs.summarize_runs(runs)
    self.assertEqual([r["n_seeds"] for r in rows], [1, 1])
    [line] = [l for l in report_claims.still_to_run(rows) if "literal" in l and
              "Fig. 6" in l]
    self.assertIn("1 of 3 seeds (seed 0 done); no-LocATER member: not run",
                  line)
    self.assertIn("configs/locater_wt2.py:contrast,seeds=3 --workdir "
                  "runs/fig6_contrast_seeds3`", line)


def _rho_run(striped_locater: bool, striped_none: bool, seeds=(0,)):
  """A Fig. 7 run whose rho maps have (or lack) a persistent profile."""
  rng = np.random.default_rng(0)
  steps = np.arange(1, 21) * 250

  def rho(striped):
    noise = rng.normal(0.5, 0.05, (len(steps), 16))
    profile = np.where(np.arange(16) % 4 == 0, 0.3, 0.0) if striped else 0.0
    return np.clip(noise + profile, 0.0, 1.0)
  run = _run("rho", seeds, 50_000, kappa2=(), label="Fig. 7")
  for seed in seeds:
    for kappa1, striped in ((100.0, striped_locater), (0.0, striped_none)):
      run["members"].append(dict(
          seed=seed, kappa1=kappa1, kappa2=kappa1 / 100, target=1.0,
          last_step=50_000, metrics={"l0/rho": (steps, rho(striped))}))
  return run


class StripeVerdictTest(absltest.TestCase):

  def test_stripes_with_locater_only_is_reproduced(self):
    cases = {(True, False): "reproduced", (False, True): "reversed",
             (True, True): "not reproduced", (False, False): "not reproduced"}
    for (with_, without), want in cases.items():
      [v] = report_claims.stripe_verdicts(
          [_rho_run(with_, without, seeds=(0, 1))])
      self.assertEqual(v["verdict"], want, (with_, without))
      self.assertIn(f"stripes in {2 * with_} of 2 LocATER maps and "
                    f"{2 * without} of 2 without", v["text"])
      self.assertNotIn("shortened", v["text"])
    run = _rho_run(True, False)
    for m in run["members"]:
      m["last_step"] = 5_000
    [v] = report_claims.stripe_verdicts([run])
    self.assertIn("shortened: 5,000 of 50,000 steps", v["text"])

  def test_no_fig7_run_no_line(self):
    self.assertEqual(
        report_claims.stripe_verdicts([_run("s0", (0,), 50_000)]), [])


class NoneArgumentTest(absltest.TestCase):

  def test_the_no_locater_member_alone_and_the_command_rebuilds(self):
    for module, arg, fig in ((depth_width, "L=3,d=32,none,seed=1", "9"),
                             (locater_wt2, "none,fairseq", "6")):
      c = module.get_config(arg)
      schema.validate(c)
      [member] = sweep.members(c)
      self.assertEqual((member["kappa1"], member["kappa2"]), (0.0, 0.0))
      config = json.loads(c.to_json())
      self.assertEqual(report_runs.figure_of(config), (fig, False))
      self.assertIn(f":{arg.replace('none,seed=1', 'seed=1,none')} "
                    "--workdir", report_runs.config_command(config, "/tmp/w"))
    two = depth_width.get_config("L=3,d=32,none,seeds=2")
    self.assertEqual([(m["seed"], m["kappa1"]) for m in sweep.members(two)],
                     [(0, 0.0), (1, 0.0)])
    with self.assertRaisesRegex(ValueError, "give one"):
      depth_width.get_config("L=3,d=32,none,contrast")

  def test_a_swept_tuple_is_passed_quoted_whatever_its_length(self):
    config = json.loads(locater_wt2.get_config().to_json())
    for kappa2, flag in (([0.5], '"(0.5,)"'), ([0.5, 1.0], '"(0.5, 1.0)"')):
      config["sweep"]["kappa2"] = kappa2
      self.assertIn(f" --config.sweep.kappa2={flag} ",
                    report_runs.config_command(config, "/tmp/w"))


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
    self.assertEqual(report_runs.figure_of(config), ("9", False))
    command = report_runs.config_command(config, "/tmp/w")
    self.assertIn("--config configs/depth_width.py:L=3,d=32,seeds=2,"
                  "contrast --workdir", command)       # no overrides
    one = json.loads(depth_width.get_config("L=1,d=32,contrast").to_json())
    self.assertLen(one["sweep"]["kappa1"], 6)
    self.assertIn("configs/depth_width.py:L=1,d=32,contrast --workdir",
                  report_runs.config_command(one, "/tmp/w"))


class WriteReportTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.runs = []
    for arg in ("smoke,seeds=2", "smoke,seeds=2,fairseq"):
      c = locater_wt2.get_config(arg)
      c.sweep.kappa2 = (0.0, 1.0)
      c.num_steps = 2
      workdir = os.path.join(cls.tmp, arg.replace(",", "_"))
      loop.train_and_evaluate(c, workdir)
      cls.runs.append(workdir)
    # A deterministic rerun of the first run (as a CPU gives): spread 0.
    cls.replicate = os.path.join(cls.tmp, "rerun")
    shutil.copytree(cls.runs[0], cls.replicate)
    cls.out = os.path.join(cls.tmp, "REPRODUCTION.md")
    cls.paths = report.write_report(cls.runs, cls.out,
                                    replicate_dirs=[cls.replicate])
    with open(cls.out) as f:
      cls.md = f.read()

  def test_summary_rows_per_reading_and_kappa2(self):
    rows = report_runs.summarize(self.runs)
    self.assertLen(rows, 4)
    for r in rows:
      self.assertEqual((r["label"], r["n_seeds"], r["final_step"],
                        r["d_model"]), ("Fig. 6 (smoke)", 2, 2, 16))
      self.assertTrue(math.isfinite(r["valid_ppl_std"]))
    self.assertEqual({r["reading"] for r in rows},
                     {"mean_loss", "summed_loss"})

  def test_markdown_opens_with_the_answer_and_gives_each_verdict_once(self):
    lines = self.md.splitlines()
    self.assertEqual(lines[4], "## Answer")
    first = "\n".join(lines[:40])
    for claim in ("Scale (B", "Entropy (C", "Perplexity (D"):
      self.assertIn(f"- **{claim}", first)
    self.assertIn("| figure | reading | seeds | B | C | D |", first)
    for claim in "BCD":
      for reading in ("literal (mean_loss)", "fairseq (summed_loss)"):
        row = (f"| Fig. 6 (smoke) | {reading} | kappa2 | {claim} | ")
        self.assertEqual(self.md.count(row), 1, row)
    self.assertIn("SHORTENED: 2 of 50,000 steps", self.md)
    self.assertIn("configs/locater_wt2.py:seeds=2,fairseq,smoke", self.md)
    self.assertIn("## Why this may differ from the paper", self.md)
    self.assertIn("- tr(W_QK) never reaches its target 1: at kappa2 = 1 ",
                  self.md)
    self.assertIn("## LocATER's own minimum", self.md)
    self.assertIn("\n| Fig. 6 (smoke) | fairseq (summed_loss) | 16 | 1 | ",
                  self.md)                     # LocATER's own minimum
    self.assertIn("## Still to run", self.md)
    self.assertIn("- fairseq (summed_loss), curves over training: ![curves]"
                  "(reproduction/fig6_smoke_curves_summed_loss.png)", self.md)
    self.assertIn("- Fig. 6, both readings: not run", self.md)  # smoke

  def test_rerun_spread_section_and_summary(self):
    self.assertIn("## Same config, same seed, run twice", self.md)
    self.assertIn("- literal (mean_loss): valid ppl 0, test ppl 0, ", self.md)
    self.assertIn("(largest relative difference of 4 pairs)", self.md)
    self.assertIn(f"--replicates {self.replicate} --out", self.md)
    with open(os.path.join(self.tmp, "reproduction", "summary.json")) as f:
      spread = json.load(f)["rerun_spread"]
    self.assertEqual(spread["mean_loss"]["entropy"]["rel"], 0.0)
    self.assertEqual(spread["mean_loss"]["entropy"]["n"], 4)  # 2 seeds x 2
    self.assertNotIn("summed_loss", spread)   # its reading was not rerun

  def test_runs_list_device_precision_and_wall_time(self):
    # The loop wrote one run_info.jsonl line per run (this CPU, float32).
    info = report_runs.run_info(self.runs[0])
    self.assertRegex(info, r"^1 x .+; compute float32; wall \d+\.\d min "
                     r"in 1 invocation \(setup \d+ s, compile \d+ s, steps "
                     r"\d+ s, .*other \d+ s\)$")
    self.assertIn(info, self.md)
    # A resumed run: its invocations' wall times add up.
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "run_info.jsonl"), "w") as f:
      for wall, dtype in ((60.0, "bfloat16"), (30.0, "bfloat16")):
        f.write(json.dumps({"wall_s": wall, "device_kind": "H100",
                            "device_count": 1, "compute_dtype": dtype}) + "\n")
    self.assertEqual(report_runs.run_info(d),
                     "1 x H100; compute bfloat16; wall 1.5 min in 2 "
                     "invocations (setup, compilation and evaluation "
                     "included)")
    # with the loop's phases: summed over the invocations
    with open(os.path.join(d, "run_info.jsonl"), "w") as f:
      for steps in (50.0, 20.0):
        f.write(json.dumps({
            "wall_s": steps + 10, "device_kind": "H100", "device_count": 1,
            "phases_s": {"setup": 4.0, "compile": 6.0, "steps": steps}}
                           ) + "\n")
    self.assertEqual(report_runs.run_info(d),
                     "1 x H100; compute float32; wall 1.5 min in 2 "
                     "invocations (setup 8 s, compile 12 s, steps 70 s)")
    self.assertEqual(report_runs.run_info(tempfile.mkdtemp()), "")

  def test_artefacts_exist(self):
    figures_dir = os.path.join(self.tmp, "reproduction")
    for name in ("summary.csv", "summary.json", "fig6_smoke.png",
                 "fig6_smoke_curves_mean_loss.png"):
      self.assertIn(os.path.join(figures_dir, name), self.paths)
      self.assertTrue(os.path.isfile(os.path.join(figures_dir, name)), name)
    with open(os.path.join(figures_dir, "summary.json")) as f:
      summary = json.load(f)
    with open(os.path.join(figures_dir, "summary.csv")) as f:
      rows = list(csv.DictReader(f))
    self.assertLen(rows, 4)
    fairseq = [r for r in rows if r["reading"] == "summed_loss"]
    self.assertIn("configs/locater_wt2.py:seeds=2,fairseq,smoke",
                  fairseq[0]["commands"])
    self.assertNotIn(" ; ", fairseq[0]["commands"])     # one run per cell
    self.assertEqual(summary["rows"][0]["commands"], [rows[0]["commands"]])
    self.assertEqual(set(summary), {"rows", "verdicts", "rerun_spread"})

  def test_rebuilt_command_names_the_overrides(self):
    command = report_runs.load_runs(self.runs[:1])[0]["command"]
    self.assertIn("--config.sweep.kappa2=", command)
    self.assertIn("--config.num_steps=2", command)
    self.assertNotIn("--config.locater", command)


@testutil.slow("a no-LocATER smoke run trained and reported")
class NoneOnlyReportTest(absltest.TestCase):

  def test_no_kappa2_figure_without_a_locater_member(self):
    """A figure with only its no-LocATER run (kappa1 = kappa2 = 0) has no
    final-values-against-kappa2 panel to draw: none is written (it came
    out as empty axes), while its curves over training are."""
    tmp = tempfile.mkdtemp()
    c = locater_wt2.get_config("smoke,none")
    c.num_steps = 2
    workdir = os.path.join(tmp, "fig6_none")
    loop.train_and_evaluate(c, workdir)
    out = os.path.join(tmp, "REPRODUCTION.md")
    paths = [os.path.basename(p) for p in report.write_report([workdir], out)]
    self.assertNotIn("fig6_smoke.png", paths)
    self.assertIn("fig6_smoke_curves_mean_loss.png", paths)
    with open(out) as f:
      self.assertNotIn("![Fig. 6 (smoke)](", f.read())


class ReadingLinesTest(absltest.TestCase):

  def test_a_reading_with_its_no_locater_member_alone_draws_no_line(self):
    def fairseq(*a, **k):
      return dict(_row(*a, **k), reading="summed_loss")

    rows = [_row(0.0, 43.0, 2.35, 201.7, n_seeds=1, kappa1=0.0),
            fairseq(0.0, 0.054, 2.784, 213.6, n_seeds=1),
            fairseq(1.0, 0.057, 2.788, 213.6, n_seeds=1)]
    with mock.patch.object(report.locater_minimum, "star_curve",
                           return_value=([], [])):
      fig = report.figure(rows, "Fig. 6")
    labels = [ax.get_legend_handles_labels()[1] for ax in fig.axes]
    self.assertEqual(labels[0], ["2: fairseq (summed_loss)"])
    # C and D: the no-LocATER member as a line (B: decades above)
    self.assertCountEqual(labels[1], ["2: fairseq (summed_loss)",
                                      "no LocATER (2.35)"])
    self.assertIn("no LocATER (201.7)", labels[2])


@testutil.slow("a Fig. 7 smoke run trained and reported; run_records_test "
               "redraws Fig. 7 from recorded maps")
class Fig7StripesTest(absltest.TestCase):

  def test_fig7_report_has_heat_maps_and_a_stripe_line_per_member(self):
    tmp = tempfile.mkdtemp()
    workdir = os.path.join(tmp, "rho")
    loop.train_and_evaluate(rho_training.get_config("smoke"), workdir)
    out = os.path.join(tmp, "REPRODUCTION.md")
    with mock.patch.object(training_plots, "fig6_figure",
                           wraps=training_plots.fig6_figure) as curves:
      report.write_report([workdir], out)
    # Fig. 7 has only rho maps: its curves are titled as Fig. 7's runs.
    self.assertEqual(curves.call_args.args[1], "7")
    with open(out) as f:
      md = f.read()
    loaded = training_plots.load_members(workdir)
    members = report_claims.rho_stripes(loaded)
    self.assertLen(members, 2)                 # LocATER and none
    for name, result in members:
      self.assertIn(f"  - {name}: ", md)
      self.assertRegex(md, r"(no )?stripes \(D = [0-9.e-]+ at key \d+, "
                       r"shift test p")
      self.assertBetween(result["p_value"], 0.0, 1.0)
    self.assertIn(f"rho_i over training (`{workdir}`): ![rho]", md)
    # the claim's verdict, from the two maps' own tests
    found = {m["kappa1"] > 0: r["stripes"]
             for m, (_, r) in zip(loaded, members)}
    verdict = {(True, False): "reproduced", (False, True): "reversed"}.get(
        (found[True], found[False]), "not reproduced")
    self.assertIn(
        f"- Fig. 7 (smoke), literal (mean_loss), claim stripes (rho_i over "
        f"training, none -> LocATER): **{verdict}**: stripes in "
        f"{int(found[True])} of 1 LocATER map and {int(found[False])} of 1 ",
        md)


def _gap_member(kappa1, kappa2, ppl, entropy=2.8, steps=(0, 10, 20)):
  return dict(kappa1=kappa1, kappa2=kappa2, target=1.0, seed=0,
              metrics={"valid/ppl": (list(steps), list(ppl)),
                       "mean/entropy": (list(steps), [entropy] * len(steps))})


class GapTest(absltest.TestCase):

  def test_differences_at_common_steps(self):
    steps, d = report_stats.step_differences(
        _gap_member(100.0, 0.0, [300.0, 250.0, 240.0])["metrics"]["valid/ppl"],
        _gap_member(100.0, 1.0, [301.0, 245.0], steps=(10, 30))["metrics"][
            "valid/ppl"])
    np.testing.assert_array_equal(steps, [10])
    np.testing.assert_allclose(d, [51.0])

  def test_one_line_per_member_on_a_band_of_the_minimal_effect(self):
    fig = report.gap_figure(
        [_gap_member(100.0, 0.0, [300.0, 250.0, 240.0]),
         _gap_member(100.0, 1.0, [300.0, 250.2, 240.1]),
         _gap_member(0.0, 0.0, [290.0, 235.0, 230.0], entropy=2.5)], "t")
    for ax, band in zip(fig.axes[:2], (0.01, 0.24)):
      self.assertEqual(ax.get_yscale(), "symlog")
      self.assertLen(ax.get_lines(), 3)            # zero line + 2 members
      self.assertAlmostEqual(ax.patches[0].get_y() + 0, -band)
    np.testing.assert_allclose(fig.axes[1].get_lines()[2].get_ydata(),
                               [-10.0, -15.0, -10.0])

  def test_no_figure_without_the_kappa2_zero_member(self):
    self.assertIsNone(report.gap_figure(
        [_gap_member(100.0, 1.0, [1.0, 1.0, 1.0])], "t"))


if __name__ == "__main__":
  absltest.main()
