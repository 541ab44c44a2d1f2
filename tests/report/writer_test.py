"""Tests for qkspec.report.writer: REPRODUCTION.md and its figures."""
import contextlib
import csv
import json
import math
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest

from configs import locater_wt2
from configs import rho_training
from qkspec.plots import training_figures
from qkspec.records import rundir
from qkspec.report import backlog
from qkspec.report import commands
from qkspec.report import floors
from qkspec.report import locater_minimum
from qkspec.report import pooled
from qkspec.report import run_cells
from qkspec.report import sections
from qkspec.report import stripes
from qkspec.report import verdicts
from qkspec.report import writer
from qkspec.training import loop
import report_trip
import testutil

# Each derived quantity of the report, and where it is derived: once.
_DERIVED = ((run_cells, "load_runs"), (run_cells, "cells"),
            (commands, "by_run"), (floors, "pairs"),
            (floors, "seed_references"), (floors, "rerun_references"),
            (floors, "candidates"), (floors, "by_reading"),
            (floors, "reruns"), (locater_minimum, "compare"),
            (verdicts, "verdicts"), (verdicts, "trends"),
            (pooled, "claim_tests"), (stripes, "results"),
            (stripes, "stripe_verdicts"), (backlog, "plan"))


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
    cls.calls = {}
    with contextlib.ExitStack() as stack:
      for module, name in _DERIVED:
        cls.calls[name] = stack.enter_context(mock.patch.object(
            module, name, wraps=getattr(module, name)))
      cls.paths = writer.write_report(cls.runs, cls.out,
                                      replicate_dirs=[cls.replicate])
    with open(cls.out) as f:
      cls.md = f.read()

  def test_each_derived_quantity_once_per_report(self):
    for (_, name), call in zip(_DERIVED, self.calls.values()):
      self.assertEqual(call.call_count, 1 + (name == "load_runs"), name)
    # load_runs: the runs, then the replicates

  def test_summary_rows_per_reading_and_kappa2(self):
    with open(os.path.join(self.tmp, "reproduction", "summary.json")) as f:
      rows = json.load(f)["rows"]
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
    self.assertIn("configs/locater_wt2.py:kappa2=0,1,seeds=2,fairseq,smoke",
                  self.md)
    self.assertIn("## Why this may differ from the paper", self.md)
    self.assertIn("- tr(W_QK) never reaches its target 1: at kappa2 = 1 ",
                  self.md)
    self.assertIn("## LocATER's own minimum", self.md)
    self.assertIn("\n| Fig. 6 (smoke) | fairseq (summed_loss) | 16 | 1 | ",
                  self.md)                     # LocATER's own minimum
    self.assertIn("## Still to run", self.md)
    self.assertIn("- fairseq (summed_loss), curves over training: ![curves]"
                  "(reproduction/fig6_smoke_curves_summed_loss.png)", self.md)
    self.assertIn("1. Fig. 7 with the rho maps kept, both readings", self.md)

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
    info = sections.run_info(run_cells.load_runs(self.runs[:1])[0])
    self.assertRegex(info, r"^1 x .+; compute float32; wall \d+\.\d min "
                     r"in 1 invocation \(setup \d+ s, compile \d+ s, steps "
                     r"\d+ s, .*other \d+ s\)$")
    self.assertIn(info, self.md)

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
    self.assertIn("configs/locater_wt2.py:kappa2=0,1,seeds=2,fairseq,smoke",
                  fairseq[0]["commands"])
    self.assertNotIn(" ; ", fairseq[0]["commands"])     # one run per cell
    self.assertEqual(summary["rows"][0]["commands"], [rows[0]["commands"]])
    self.assertEqual(set(summary), {"rows", "verdicts", "stripes", "trends",
                                    "pooled", "rerun_spread"})
    self.assertEqual({t["family"] for t in summary["pooled"]},
                     {"primary", None})          # no no-LocATER member

  def test_rebuilt_command_names_the_overrides(self):
    command = commands.by_run(run_cells.load_runs(self.runs[:1]))[
        self.runs[0]]
    self.assertIn("configs/locater_wt2.py:kappa2=0,1,seeds=2,smoke ", command)
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
    paths = [os.path.basename(p) for p in writer.write_report([workdir], out)]
    self.assertNotIn("fig6_smoke.png", paths)
    self.assertIn("fig6_smoke_curves_mean_loss.png", paths)
    with open(out) as f:
      self.assertNotIn("![Fig. 6 (smoke)](", f.read())


@testutil.slow("a Fig. 7 smoke run trained and reported; store_test "
               "redraws Fig. 7 from recorded maps")
class Fig7StripesTest(absltest.TestCase):

  def test_fig7_report_has_heat_maps_and_a_stripe_line_per_member(self):
    tmp = tempfile.mkdtemp()
    workdir = os.path.join(tmp, "rho")
    loop.train_and_evaluate(rho_training.get_config("smoke"), workdir)
    out = os.path.join(tmp, "REPRODUCTION.md")
    with mock.patch.object(training_figures, "fig6_figure",
                           wraps=training_figures.fig6_figure) as curves:
      writer.write_report([workdir], out)
    # Fig. 7 has only rho maps: its curves are titled as Fig. 7's runs.
    self.assertEqual(curves.call_args.args[1], "7")
    with open(out) as f:
      md = f.read()
    loaded = rundir.load_members(workdir)
    [run] = run_cells.load_runs([workdir])
    found = stripes.results([run])
    members = [(n, found[m["key"]]) for n, m in zip(
        rundir.member_names(loaded), run.members)]
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


@testutil.slow("the committed records read and judged under a profiler; "
               "WriteReportTest checks that each derived quantity is "
               "computed once")
class TripTest(absltest.TestCase):

  def test_from_the_run_directories_to_the_verdicts(self):
    """Read, then judge, before anything renders: at most 10 report files
    on the way, the writer left once and entered again only at the end."""
    rooms = report_trip.trip()
    files, _ = report_trip.counts(rooms)
    self.assertLessEqual(files, 10, rooms)
    writer_at = [i for i, r in enumerate(rooms)
                 if r == "qkspec/report/writer.py"]
    self.assertEqual(writer_at, [0, len(rooms) - 1], rooms)
    render = {"answer.py", "rules.py", "figures.py", "sections.py"}
    self.assertEmpty([r for r in rooms if r.split("/")[-1] in render])


if __name__ == "__main__":
  absltest.main()
