"""Both readings of kappa side by side in one program (`both_readings`).

`sweep.penalty_added_to` lists the reading per member; the step multiplies
each member's penalty by its own factor (qkspec.training.step.
penalty_scales). A member must train exactly as its reading's run alone,
and the report must split such a run into the two readings' cells.
"""
import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import ml_collections
import numpy as np

from configs import depth_width
from configs import locater_wt2
from configs import rho_training
from qkspec.config import defaults
from qkspec.config import schema
from qkspec.report import commands
from qkspec.report import run_cells
from qkspec.report import writer
from qkspec.training import loop
from qkspec.training import step as step_lib
from qkspec.training import sweep
import testutil
import training_fixtures


BOTH = ("mean_loss", "summed_loss")


def _smoke(arg: str = "", kappa2=(0.0, 1.0)):
  c = locater_wt2.get_config(",".join(filter(None, ("smoke", arg))))
  if c.sweep.mode == "product":
    c.sweep.kappa2 = kappa2
  schema.validate(c)
  return c


def _steps(c, n: int = 2):
  """(params, metrics) after `n` train steps of `c` on a fixed batch."""
  steps, state, dropout_keys = training_fixtures.initialized(c)
  for _ in range(n):
    state, metrics = steps.train(state, training_fixtures.lm_batch(c),
                                 dropout_keys)
  return jax.device_get(state.params), jax.device_get(metrics)


def _member(tree, i):
  return jax.tree.map(lambda x: x[i], tree)


def _assert_params_close(a, b):
  """Every weight to float rounding, except the key bias: its gradient is
  exactly zero (softmax is shift-invariant per query), so Adam turns its
  float noise into order-dependent updates that never change an output
  (tests/training/sweep_test.py)."""
  b = dict(jax.tree_util.tree_leaves_with_path(b))
  for path, x in jax.tree_util.tree_leaves_with_path(a):
    name = jax.tree_util.keystr(path)
    if "['key']['bias']" not in name:
      np.testing.assert_allclose(x, b[path], rtol=1e-5, atol=1e-7,
                                 err_msg=name)


class MembersTest(parameterized.TestCase):

  def test_every_kappa2_under_both_readings(self):
    c = locater_wt2.get_config("both_readings")
    schema.validate(c)
    members = sweep.members(c)
    self.assertLen(members, 2 * len(defaults.KAPPA2_SWEEP))
    self.assertEqual(
        [(m["kappa2"], m["penalty_added_to"]) for m in members],
        [(k, r) for k in defaults.KAPPA2_SWEEP for r in BOTH])
    self.assertEqual({m["seed"] for m in members}, {0})
    self.assertEqual(sweep.member_name(members[1], sweep.swept_keys(c)),
                     "kappa2=0,penalty_added_to=summed_loss")
    self.assertEqual(step_lib.penalty_scales(sweep.make_plan(c)),
                     [1.0, 1.0 / 4096] * len(defaults.KAPPA2_SWEEP))

  def test_contrast_member_once_per_seed(self):
    c = depth_width.get_config("L=1,d=32,both_readings,seeds=2,contrast")
    schema.validate(c)
    members = sweep.members(c)
    self.assertLen(members, 2 * (2 * len(defaults.KAPPA2_SWEEP) + 1))
    for seed in (0, 1):
      ms = [(m["kappa1"], m["kappa2"], m["penalty_added_to"])
            for m in members if m["seed"] == seed]
      self.assertEqual(ms, [(100.0, k, r) for r in BOTH
                            for k in defaults.KAPPA2_SWEEP]
                       + [(0.0, 0.0, "mean_loss")])
    fig7 = rho_training.get_config("both_readings,seeds=2")
    schema.validate(fig7)
    self.assertEqual(
        [(m["seed"], m["kappa1"], m["penalty_added_to"])
         for m in sweep.members(fig7)],
        [(s, k1, r) for s in (0, 1) for k1, r in
         ((100.0, "mean_loss"), (100.0, "summed_loss"), (0.0, "mean_loss"))])

  def test_one_reading_configs_are_unchanged(self):
    # Without both_readings nothing sweeps the reading (the configs of
    # every run made so far rebuild as they were).
    for arg in ("", "fairseq", "seeds=3,contrast", "fairseq,seeds=2"):
      c = locater_wt2.get_config(arg)
      self.assertEqual(tuple(c.sweep.penalty_added_to), (), arg)
      self.assertLen(set(step_lib.penalty_scales(sweep.make_plan(c))), 1)

  @parameterized.parameters(
      ("both_readings,fairseq", "give one"),
      ("both_readings,none", "the same under both readings"))
  def test_contradicting_arguments_are_refused(self, arg, message):
    with self.assertRaisesRegex(ValueError, message):
      depth_width.get_config("L=1,d=32," + arg)

  def test_bad_sweep_reading_is_refused(self):
    d = _smoke("both_readings").to_dict()
    d["sweep"]["penalty_added_to"] = ("mean_loss", "fairseq")
    with self.assertRaisesRegex(
        ValueError, r"config\.sweep\.penalty_added_to entries must be one "
        r"of \('mean_loss', 'summed_loss'\)"):
      schema.validate(ml_collections.ConfigDict(d))
    d["sweep"].update(mode="zip", penalty_added_to=BOTH, kappa2=(0., .1, 1.))
    with self.assertRaisesRegex(ValueError, "equal lengths"):
      schema.validate(ml_collections.ConfigDict(d))


@testutil.slow("a both-readings sweep and each member trained alone; "
               "sweep_test and step_reference_test check each part")
class StepTest(parameterized.TestCase):

  @parameterized.parameters(0, 1)     # vmap, and members one at a time
  def test_each_member_trains_as_its_reading_alone(self, member_batch):
    c = _smoke("both_readings")
    c.sweep.member_batch = member_batch
    params, metrics = _steps(c)
    members = sweep.members(c)
    self.assertLen(members, 4)
    for i, m in enumerate(members):
      alone = sweep.member_config(c, m)
      self.assertEqual(alone.locater.penalty_added_to, m["penalty_added_to"])
      p1, m1 = _steps(alone)
      for key in ("loss", "penalty", "grad_norm"):
        np.testing.assert_allclose(metrics[key][i], m1[key], rtol=2e-6,
                                   err_msg=f"{key}, member {i}")
      _assert_params_close(_member(params, i), p1)
    # The readings differ where kappa does not vanish: at kappa2 = 1 the
    # literal member's penalty is N (= 64 targets here) times the fairseq
    # one's, up to the two steps' different weights.
    n = step_lib.targets_per_batch(c)
    np.testing.assert_allclose(metrics["penalty"][2],
                               n * metrics["penalty"][3], rtol=0.2)
    w = lambda p: p["decoder"]["block_0"]["attn"]["query"]["kernel"]  # noqa
    self.assertGreater(float(np.abs(w(_member(params, 2))
                                    - w(_member(params, 3))).max()), 1e-4)


@testutil.slow("a both-readings run trained and reported")
class ReportTest(absltest.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.dirs = {}
    for arg in ("seeds=2,both_readings", "seeds=2", "seeds=2,fairseq"):
      c = _smoke(arg)
      c.num_steps = c.checkpoint_every = 2
      cls.dirs[arg] = os.path.join(cls.tmp, arg.replace(",", "_"))
      loop.train_and_evaluate(c, cls.dirs[arg])

  def test_one_program_reports_as_the_two_runs(self):
    def groups(dirs):
      cells = run_cells.cells(run_cells.load_runs(dirs))
      return [g for c in cells.values() for g in c.groups]
    packed = groups([self.dirs["seeds=2,both_readings"]])
    apart = groups([self.dirs["seeds=2"], self.dirs["seeds=2,fairseq"]])
    key = lambda g: (g.reading, g.kappa1, g.kappa2)  # noqa: E731
    self.assertEqual([key(g) for g in sorted(packed, key=key)],
                     [key(g) for g in sorted(apart, key=key)])
    self.assertEqual({g.reading for g in packed}, set(BOTH))
    for a, b in zip(sorted(packed, key=key), sorted(apart, key=key)):
      self.assertEqual((a.n_seeds, a.final_step), (2, 2))
      for name, _, _ in run_cells.QUANTITIES:
        np.testing.assert_allclose(a.values[name], b.values[name],
                                   rtol=1e-5, err_msg=f"{key(a)} {name}")

  def test_command_rebuilds_and_the_run_is_listed_once(self):
    run_dir = self.dirs["seeds=2,both_readings"]
    with open(os.path.join(run_dir, "config.json")) as f:
      config = json.load(f)
    command = commands.config_command(config, run_dir,
                                      *run_cells.figure_of(config))
    self.assertIn("configs/locater_wt2.py:kappa2=0,1,seeds=2,both_readings,"
                  "smoke --config.num_steps=2 ", command)
    out = os.path.join(self.tmp, "REPRODUCTION.md")
    writer.write_report([run_dir], out)
    with open(out) as f:
      md = f.read()
    runs = md.split("## Runs")[1].split("##")[0]
    self.assertEqual(runs.count(run_dir), 1)
    self.assertIn("both readings side by side", runs)
    for reading in ("literal (mean_loss)", "fairseq (summed_loss)"):
      # a verdict row and curves per reading, from the one run
      self.assertIn(f"| Fig. 6 (smoke) | {reading} | kappa2 | D |", md)
      self.assertIn(f"- {reading}, curves over training: ", md)

  def test_resuming_without_the_swept_readings_is_refused(self):
    c = _smoke("seeds=2")
    c.num_steps = 4
    with self.assertRaisesRegex(ValueError, r"sweep.penalty_added_to \["):
      loop.train_and_evaluate(c, self.dirs["seeds=2,both_readings"])


if __name__ == "__main__":
  absltest.main()
