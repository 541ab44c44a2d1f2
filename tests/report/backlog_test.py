"""Tests for qkspec.report.backlog: the GPU backlog in priority order."""
import re
from unittest import mock

from absl.testing import absltest

from qkspec.config import defaults
from qkspec.report import backlog
from qkspec.report import commands
from qkspec.report import run_cells
from qkspec.training import sweep

_FIGS = {"6": (1, 128), "7": (1, 128), "8": (1, 32), "9": (3, 32),
         "10": (6, 32), "11": (3, 128), "12": (6, 128)}


def _rows(fig, seeds, kappa2s=defaults.KAPPA2_SWEEP, none=True,
          final_step=50_000, smoke=False):
  """Summary rows of `fig` under both readings: LocATER at `kappa2s` and
  (`none`) the no-LocATER member, each with `seeds`."""
  groups = [(100.0, k) for k in kappa2s] + [(0.0, 0.0)] * none
  return [dict(figure=fig, reading=reading, kappa1=k1, kappa2=k2,
               seeds=list(seeds), n_seeds=len(seeds), final_step=final_step,
               smoke=smoke) for reading in run_cells.READINGS
          for k1, k2 in groups]


def _maps(kept=False, steps=50_000):
  return [dict(reading=r, kept=kept, steps=steps) for r in run_cells.READINGS]


def _complete():
  """Every item done: maps, 3 seeds everywhere, kappa2 up to 1000."""
  rows = _rows("6", range(3), defaults.KAPPA2_SWEEP + backlog.STRONG)
  for fig in ("8", "9", "10", "11", "12"):
    rows += _rows(fig, range(3))
  return rows


def _commands(items):
  return [c for _, cs in items for c in cs]


class ItemsTest(absltest.TestCase):

  def test_the_records_backlog_in_priority_order(self):
    # as the records stand: earlier stripe results, Fig. 6 with 3 seeds and
    # no none member, Figs. 8-12 one seed each with their none member
    rows = _rows("6", range(3), none=False)
    for fig in ("8", "9", "10", "11", "12"):
      rows += _rows(fig, [0])
    items = backlog.items(rows, _maps(kept=True))
    self.assertEqual([what.split()[0] for what, _ in items],
                     ["Fig.", "the", "Fig.", "3"])
    first, paired, strong, seeds = [cs for _, cs in items]
    self.assertEqual(first, [("7", "configs/rho_training.py",
                              "both_readings")])
    self.assertEqual(paired, [
        ("6", "configs/locater_wt2.py", "none,seeds=3"),
        ("10", "configs/depth_width.py", "L=6,d=32,both_readings,contrast,"
         "seed=1"),
        ("10", "configs/depth_width.py", "L=6,d=32,both_readings,contrast,"
         "seed=2")])
    self.assertEqual(strong, [("6", "configs/locater_wt2.py",
                               "kappa2=10,100,1000,both_readings,seeds=3")])
    self.assertEqual({fig for fig, _, _ in seeds}, {"8", "9", "11", "12"})
    self.assertEqual({arg.split(",")[-1] for _, _, arg in seeds},
                     {"seed=1", "seed=2"})
    self.assertIn("Figs. 8, 9, 11, 12", items[3][0])

  def test_done_items_leave_and_a_complete_plan_leaves_nothing(self):
    self.assertEqual(backlog.items(_complete(), _maps()), [])
    # maps kept by a record (earlier test) or shortened: Fig. 7 is back
    for maps in (_maps(kept=True), _maps(steps=10_000)):
      [(what, _)] = backlog.items(_complete(), maps)
      self.assertStartsWith(what, "Fig. 7 with the rho maps kept")

  def test_a_shortened_or_smoke_group_is_not_done(self):
    for change in (dict(final_step=20_000), dict(smoke=True)):
      rows = [dict(r, **change) if r["figure"] == "9" else r
              for r in _complete()]
      [(_, cs)] = backlog.items(rows, _maps())
      self.assertEqual(cs, [("9", "configs/depth_width.py",
                             "L=3,d=32,both_readings,contrast,seeds=3")])

  def test_only_the_none_member_missing_trains_it_alone(self):
    rows = [r for r in _complete()
            if not (r["figure"] == "11" and r["kappa1"] == 0)]
    rows += _rows("11", [0], kappa2s=(), none=True)
    [(_, cs)] = backlog.items(rows, _maps())
    self.assertEqual(cs, [("11", "configs/depth_width.py",
                           "L=3,d=128,none,seed=1"),
                          ("11", "configs/depth_width.py",
                           "L=3,d=128,none,seed=2")])


class CommandTest(absltest.TestCase):

  def test_every_backlog_command_loads_under_todays_schema(self):
    rows = _rows("6", [0], none=False)          # most items, all figures
    items = backlog.items(rows, _maps(kept=True))
    self.assertLen(items, 4)
    found = _commands(items)
    self.assertLen({backlog.command(*c) for c in found}, len(found))
    for c in found:
      command = backlog.command(*c)
      self.assertIn(backlog.GPU, command)
      config = commands.check(command)
      self.assertEqual(config.model.kernels, "pallas")
      self.assertGreater(len(sweep.members(config)), 0)
    self.assertEqual(
        backlog.command("6", "configs/locater_wt2.py",
                        "kappa2=10,100,1000,both_readings,seeds=3"),
        "python launch/train.py --config configs/locater_wt2.py:kappa2=10,"
        "100,1000,both_readings,seeds=3 " + backlog.GPU + " --workdir "
        "runs/fig6_kappa2_10_100_1000_both_readings_seeds3")

  def test_members_of_a_config(self):
    for arg, n in (("kappa2=10,100,1000,both_readings,seeds=3", 18),
                   ("none,seeds=3", 3), ("", 5), ("none", 1),
                   ("both_readings,contrast,seed=1", 11)):
      config = commands.check(f"python launch/train.py --config "
                              f"configs/locater_wt2.py:{arg} --workdir w")
      self.assertEqual(len(sweep.members(config)), n, arg)


class ProjectionTest(absltest.TestCase):

  def test_minutes_from_the_runs_nearest_in_members(self):
    walls = [(10, 4.0), (5, 2.5), (5, 3.0), (1, 1.6)]
    self.assertAlmostEqual(backlog.project(walls, 12), 12 * 0.4)
    self.assertAlmostEqual(backlog.project(walls, 6), 6 * 0.55)   # median
    self.assertAlmostEqual(backlog.project(walls, 1), 1.6)
    self.assertTrue(backlog.project([], 3) != backlog.project([], 3))  # NaN

  def test_lines_number_the_items_and_sum_the_minutes(self):
    run = dict(smoke=False, final_step=50_000, path="p", num_layers=1,
               d_model=128, members=[{}] * 5)
    with mock.patch.object(run_cells, "wall_minutes", return_value=2.5):
      lines = backlog.still_to_run(_rows("6", range(3), none=False),
                                   [run], _maps())
    self.assertTrue(lines[0].startswith("1. The no-LocATER member"), lines)
    # none,seeds=3: 3 members x 0.5 min; Fig. 10's: no run to project from
    self.assertIn("(no recorded run of its architecture to project from)",
                  lines[0])
    self.assertRegex(lines[1], r"^2\. Fig\. 6 with kappa2 = 10, 100, 1000, "
                     r"both readings, until tr\(W_QK\) reaches its target "
                     r"\(≈ 9 GPU min\): `python launch/train.py")
    self.assertLen(re.findall(r"`python launch/train.py", "\n".join(lines)),
                   len(_commands(backlog.items(
                       _rows("6", range(3), none=False), _maps()))))


if __name__ == "__main__":
  absltest.main()
