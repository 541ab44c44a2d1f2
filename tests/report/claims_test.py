"""Tests for qkspec.report.claims: stripe verdicts, still to run."""
import re

from absl.testing import absltest
import numpy as np

from qkspec.config import args as args_lib
from qkspec.report import answer
from qkspec.report import claims
from qkspec.report import run_cells
from qkspec.report import stripes
import report_fixtures
import testutil


def _run_rows(figure, reading, n_seeds, final_step, smoke=False,
              none=None):
  """Summary rows of a kappa2 = 0, 1 sweep; `none` adds a no-LocATER group
  (default: for the figures that need one)."""
  pairs = [(100.0, 0.0), (100.0, 1.0)]
  if none or (none is None and figure in claims.CONTRAST_FIGS):
    pairs.append((0.0, 0.0))
  return [dict(figure=figure, reading=reading, seeds=list(range(n_seeds)),
               n_seeds=n_seeds, final_step=final_step, smoke=smoke,
               kappa1=k1, kappa2=k2) for k1, k2 in pairs]


class StillToRunTest(absltest.TestCase):

  def test_lists_each_uncovered_cell_with_its_command(self):
    rows = (_run_rows("6", "mean_loss", 1, 50_000)        # 1 of 3
            + _run_rows("6", "summed_loss", 3, 11_000)    # shortened
            + _run_rows("8", "mean_loss", 1, 50_000)      # covered
            + _run_rows("9", "mean_loss", 1, 50_000, smoke=True))
    lines = claims.still_to_run(rows)
    # one line per reading where the readings lack different runs (Figs. 6
    # and 8), one for both where they lack the same (Figs. 7, 9-12)
    self.assertLen(lines, len(claims.PLAN) + 1)
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
    lines = claims.still_to_run(
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
    rows = [r for fig, seeds in claims.PLAN.items()
            for reading in run_cells.READINGS
            for r in _run_rows(fig, reading, seeds, 50_000)]
    self.assertEqual(claims.still_to_run(rows), [])
    rows[0]["seeds"] = [0, 2]                    # one group lacks seed 1
    [line] = claims.still_to_run(rows)
    self.assertIn("--config configs/locater_wt2.py:seed=1 --workdir "
                  "runs/fig6_seed1`", line)

  def test_figs_8_to_12_need_a_no_locater_member(self):
    rows = _run_rows("9", "mean_loss", 1, 50_000, none=False)
    [line] = [l for l in claims.still_to_run(rows)
              if l.startswith("- Fig. 9, literal")]
    self.assertIn("no-LocATER member: not run", line)
    self.assertIn("--config configs/depth_width.py:L=3,d=32,none --workdir "
                  "runs/fig9_none`", line)
    rows += [dict(rows[0], kappa1=0.0, kappa2=0.0)]        # a none run
    self.assertFalse([l for l in claims.still_to_run(rows)
                      if l.startswith("- Fig. 9, literal")])

  def test_fig7_shared_no_locater_member_alone_leaves_the_run_to_do(self):
    # Fig. 7 under fairseq's reading: both members; its none member is
    # also counted for the literal reading, whose LocATER member is missing.
    runs = [report_fixtures.loaded_run("fig7_fairseq", (0,), 50_000,
                                       kappa2=(0.0, 1.0), label="Fig. 7")]
    runs[0]["reading"] = "summed_loss"
    runs[0]["members"][0]["kappa1"] = 0.0            # the none member
    rows = run_cells.summarize_runs(runs)
    self.assertIn(("mean_loss", 0.0), [(r["reading"], r["kappa1"])
                                       for r in rows])
    lines = [l for l in claims.still_to_run(rows) if "Fig. 7" in l]
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
    for reading in run_cells.READINGS:
      run = report_fixtures.loaded_run("fig9_both_c_seeds3", (0, 1, 2), 50_000,
                                       kappa2=(0.0, 1e-3, 1e-2, 1e-1, 1.0),
                                       label="Fig. 9")
      if reading == "mean_loss":
        run["members"] += [dict(m, kappa1=0.0) for m in
                           report_fixtures.loaded_run("", (0, 1, 2), 50_000,
                                                      kappa2=(0.0,))["members"]]
      runs.append(dict(run, reading=reading, both_readings=True))
    rows = run_cells.summarize_runs(runs)
    self.assertEqual({(r["reading"], r["kappa1"], r["n_seeds"])
                      for r in rows if r["kappa2"] == 0},
                     {(reading, k1, 3) for reading in run_cells.READINGS
                      for k1 in (0.0, 100.0)})
    self.assertFalse([l for l in claims.still_to_run(rows)
                      if l.startswith("- Fig. 9")])


def _rho_run(striped_locater: bool, striped_none: bool, seeds=(0,)):
  """A Fig. 7 run whose rho maps have (or lack) a persistent profile."""
  rng = np.random.default_rng(0)
  steps = np.arange(1, 21) * 250

  def rho(striped):
    noise = rng.normal(0.5, 0.05, (len(steps), 16))
    profile = np.where(np.arange(16) % 4 == 0, 0.3, 0.0) if striped else 0.0
    return np.clip(noise + profile, 0.0, 1.0)
  run = report_fixtures.loaded_run("rho", seeds, 50_000, kappa2=(),
                                   label="Fig. 7")
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
      [v] = claims.stripe_verdicts(
          [_rho_run(with_, without, seeds=(0, 1))])
      self.assertEqual(v["verdict"], want, (with_, without))
      self.assertIn(f"stripes in {2 * with_} of 2 LocATER maps and "
                    f"{2 * without} of 2 without", v["text"])
      self.assertNotIn("shortened", v["text"])
    run = _rho_run(True, False)
    for m in run["members"]:
      m["last_step"] = 5_000
    [v] = claims.stripe_verdicts([run])
    self.assertIn("shortened: 5,000 of 50,000 steps", v["text"])

  def test_no_fig7_run_no_line(self):
    self.assertEqual(
        claims.stripe_verdicts([report_fixtures.loaded_run("s0", (0,),
                                                           50_000)]), [])


def _fig7_run(locater, none):
  """A Fig. 7 run: LocATER's and no LocATER's rho maps (or, where a map
  is None, a record's kept result of the earlier test)."""
  members = []
  for kappa1, rho in ((100.0, locater), (0.0, none)):
    m = dict(seed=0, kappa1=kappa1, kappa2=kappa1 / 100, target=1.0,
             last_step=50_000, metrics={})
    if rho is None:
      m["stripes"] = {"contrast": 0.2, "p_value": 0.00498, "stripes": True}
    else:
      m["metrics"]["l0/rho"] = (
          np.arange(1, report_fixtures.RHO_S + 1) * 250, rho)
    members.append(m)
  return dict(run_dir="rho", figure="7", smoke=False, label="Fig. 7",
              reading="mean_loss", command="", members=members,
              final_step=50_000, num_steps=50_000)


class StripeVerdictWordsTest(absltest.TestCase):

  def test_maps_give_the_rule_and_no_caveat(self):
    [v] = claims.stripe_verdicts([_fig7_run(
        report_fixtures.rho_map(report_fixtures.striped_profile()),
        report_fixtures.rho_map(0.1 + 0.8 * report_fixtures.RHO_X))])
    self.assertEqual(v["verdict"], "reproduced")
    self.assertFalse(v["kept"] or v["earlier"])
    self.assertIn(f"({stripes.RULE})", v["text"])
    line = "\n".join(answer.answer([], [v]))
    self.assertIn("**Stripes in rho_i (Fig. 7): reproduced.**", line)
    self.assertNotIn("redrawn", line)

  def test_results_of_the_earlier_test_say_so(self):
    [v] = claims.stripe_verdicts([_fig7_run(None, None)])
    self.assertEqual(v["verdict"], "not reproduced")
    self.assertTrue(v["kept"] and v["earlier"])
    self.assertIn(f"({stripes.EARLIER_RULE})", v["text"])
    self.assertIn("cannot be redrawn from them, and the test (the spread of "
                  "the time-averaged profile) also counts a smooth gradient "
                  "over positions as stripes.",
                  "\n".join(answer.answer([], [v])))


if __name__ == "__main__":
  absltest.main()
