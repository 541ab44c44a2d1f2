"""Tests for qkspec.report.backlog: the GPU backlog in priority order."""
import dataclasses
import math

from absl.testing import absltest

from qkspec.config import defaults
from qkspec.report import backlog
from qkspec.report import commands
from qkspec.report import run_cells
from qkspec.report import stripes
from qkspec.training import sweep
import report_fixtures

_FIGS = {"6": (1, 128), "7": (1, 128), "8": (1, 32), "9": (3, 32),
         "10": (6, 32), "11": (3, 128), "12": (6, 128)}


def _rows(fig, seeds, kappa2s=defaults.KAPPA2_SWEEP, none=True,
          final_step=50_000, smoke=False):
  """Member groups of `fig` under both readings: LocATER at `kappa2s` and
  (`none`) the no-LocATER member, each with `seeds`."""
  pairs = [(100.0, k) for k in kappa2s] + [(0.0, 0.0)] * none
  return [run_cells.group(
      {}, figure=fig, smoke=smoke, reading=reading,
      run_dirs=(), d_model=0, num_layers=0, seq_len=64, kappa1=k1,
      kappa2=k2, target=1.0, seeds=tuple(seeds), final_step=final_step,
      num_steps=50_000) for reading in run_cells.READINGS for k1, k2 in pairs]


def _maps(kept=False, steps=50_000):
  return [stripes.StripeVerdict(
      label="Fig. 7", reading=r, verdict="reproduced", locater=(1, 1),
      without=(1, 0), kept=kept, earlier=kept, steps=steps, p_values=())
          for r in run_cells.READINGS]


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
      rows = [dataclasses.replace(r, **change) if r.figure == "9" else r
              for r in _complete()]
      [(_, cs)] = backlog.items(rows, _maps())
      self.assertEqual(cs, [("9", "configs/depth_width.py",
                             "L=3,d=32,both_readings,contrast,seeds=3")])

  def test_only_the_none_member_missing_trains_it_alone(self):
    rows = [r for r in _complete()
            if not (r.figure == "11" and r.kappa1 == 0)]
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
    self.assertTrue(math.isnan(backlog.project([], 3)))

  def test_projected_on_the_device_most_runs_ran_on(self):
    """Two Fig. 6 runs of 5 members on the H200 (2.5 and 3.5 min), one on
    an H100 (8 min): minutes per member 0.6 on the H200, the H100 run 8 /
    5 / 0.6 = 2.7 times as long."""
    def run(path, minutes, device):
      return report_fixtures.run(path, [report_fixtures.member(
          100.0, k) for k in defaults.KAPPA2_SWEEP], "Fig. 6", info=[dict(
              wall_s=60 * minutes, device_kind=device, device_count=1)])
    runs = [run("a", 2.5, "H200"), run("b", 3.5, "H200"),
            run("c", 8.0, "H100")]
    plan = backlog.plan(_rows("6", range(3), none=False), _maps(), runs)
    self.assertEqual(plan.device, "H200")
    [ratio] = plan.slower
    self.assertAlmostEqual(ratio, 8.0 / 5 / 0.6)
    first = plan.items[0]
    self.assertStartsWith(first.what, "the no-LocATER member")
    # none,seeds=3: 3 members x 0.6 min; Fig. 10's: no run to project from
    self.assertTrue(math.isnan(first.minutes))
    self.assertAlmostEqual(plan.items[1].minutes, 18 * 0.6)   # 18 members
    self.assertEqual(first.commands[0], backlog.command(
        "6", "configs/locater_wt2.py", "none,seeds=3"))


class BatchSeedTest(absltest.TestCase):

  def test_a_whole_sweep_of_one_seed_varies_the_batch_order(self):
    self.assertEqual(backlog.batch_seed("L=1,d=32,both_readings,contrast,"
                                        "seed=2"), 2)
    for arg in ("none,seed=1", "kappa2=10,both_readings,seed=1",
                "both_readings,contrast,seeds=3", "both_readings"):
      self.assertEqual(backlog.batch_seed(arg), 0, arg)
    command = backlog.command("8", "configs/depth_width.py",
                              "L=1,d=32,both_readings,contrast,seed=2")
    self.assertIn(" --config.data.seed=2 --workdir ", command)
    self.assertEqual(commands.check(command).data.seed, 2)


if __name__ == "__main__":
  absltest.main()
