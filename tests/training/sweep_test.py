"""qkspec.training.sweep: a vmapped member equals the same config alone;
a run's plan (members, names, layout, mesh) is worked out once."""
import json
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from configs import locater_wt2
from configs import theory_task
from qkspec.theory import locater
from qkspec.training import loop
from qkspec.training import metric_writer
from qkspec.training import sweep
import testutil
import training_fixtures



class MembersTest(absltest.TestCase):

  def test_zip_and_product(self):
    c = theory_task.get_config("smoke")
    ms = sweep.members(c)
    self.assertEqual([(m["kappa1"], m["kappa2"], m["target"]) for m in ms],
                     [(0.0, 0.0, 1.0), (100.0, 1.0, 1.0),
                      (100.0, 100.0, 12.0)])
    c.sweep.mode = "product"
    c.sweep.kappa1, c.sweep.kappa2, c.sweep.target = (), (0.0, 1.0), ()
    c.sweep.seed = (0, 1, 2)
    ms = sweep.members(c)
    self.assertLen(ms, 6)
    self.assertEqual(sweep.member_name(ms[-1], sweep.swept_keys(c)),
                     "seed=2,kappa2=1")
    alone = sweep.member_config(c, ms[-1])
    self.assertEqual(sweep.swept_keys(alone), [])
    self.assertEqual((alone.seed, alone.locater.kappa2), (2, 1.0))


class HParamsTest(absltest.TestCase):

  def test_hparams_of_members(self):
    ms = sweep.members(theory_task.get_config("smoke"))
    one = sweep.hparams(ms[2])
    self.assertIsInstance(one, locater.LocaterHParams)
    self.assertEqual(tuple(float(x) for x in one), (100.0, 100.0, 12.0))
    stacked = sweep.stack([sweep.hparams(m) for m in ms])
    self.assertIsInstance(stacked, locater.LocaterHParams)
    np.testing.assert_array_equal(stacked.kappa1, [0.0, 100.0, 100.0])
    np.testing.assert_array_equal(stacked.target, [1.0, 1.0, 12.0])
    self.assertEqual(stacked.kappa2.dtype, np.float32)


class LayoutTest(parameterized.TestCase):

  @parameterized.parameters(
      # (N, devices): (m groups, data devices per group, N padded)
      (5, 8, (8, 1, 8)),        # one member a device, 3 copies of the last
      (5, 4, (4, 1, 8)),        # two a device
      (3, 2, (2, 1, 4)),
      (2, 8, (2, 4, 2)),        # each member's batch over 4 devices
      (3, 8, (4, 2, 4)),
      (4, 4, (4, 1, 4)),        # nothing pads
      (9, 8, (8, 1, 16)),
      (6, 6, (6, 1, 6)),
      (4, 6, (6, 1, 6)),
      (5, 1, (1, 1, 5)),        # one device: replicated, as unsharded
      (1, 4, (1, 4, 1)),        # one member (or a single run)
  )
  def test_groups_data_and_padding(self, n, devices, want):
    lay = sweep.layout(n, devices)
    self.assertEqual((lay.groups, lay.data, lay.padded), want)
    self.assertEqual(lay.groups * lay.data, devices)
    self.assertEqual(lay.padded % lay.groups, 0)
    self.assertEqual(sweep.layout(n, devices, shard=False), (n, 1, devices))

  def test_padding_repeats_the_last_member(self):
    lay = sweep.layout(3, 2)
    x = np.arange(6.0).reshape(3, 2)
    padded = sweep.pad({"x": x}, lay)["x"]
    np.testing.assert_array_equal(padded, [[0, 1], [2, 3], [4, 5], [4, 5]])
    np.testing.assert_array_equal(sweep.real({"x": padded}, lay)["x"], x)
    self.assertIs(sweep.pad(x, sweep.layout(4, 4)), x)

  def test_shard_members_auto_and_processes(self):
    c = theory_task.get_config("smoke")
    self.assertTrue(sweep.shards_members(c, 4))
    self.assertFalse(sweep.shards_members(c, 1))
    self.assertFalse(sweep.shards_members(c, 4, processes=2))
    c.sweep.shard_members = False
    self.assertFalse(sweep.shards_members(c, 4))
    c.sweep.shard_members = True
    with self.assertRaisesRegex(ValueError, "needs one process"):
      sweep.shards_members(c, 4, processes=2)


class VmappedSweepTest(parameterized.TestCase):

  # member_batch: -1 auto (1 on a CPU: a loop with no batch axis), 0 all
  # members vmapped, 3 vmapped groups of 3 and 1 in a loop.
  @parameterized.parameters(-1, 0, 3)
  def test_member_of_sweep_equals_the_config_trained_alone(self,
                                                          member_batch):
    # LM with dropout 0.1: members differ in seed (init + dropout keys) and
    # kappa2 (an array in the state, not a compile-time constant).
    if member_batch != -1:
      testutil.skip_unless_slow(self, "the same sweep batched otherwise")
    c = locater_wt2.get_config("smoke")
    c.sweep.member_batch = member_batch
    c.sweep.mode = "product"
    c.sweep.seed = (0, 1)
    c.sweep.kappa2 = (0.0, 1.0)
    c.num_steps, c.log_every, c.eval_every = 4, 2, 4
    ms = sweep.members(c)
    i = 3
    self.assertEqual((ms[i]["seed"], ms[i]["kappa2"]), (1, 1.0))
    with tempfile.TemporaryDirectory() as tmp:
      swept = loop.train_and_evaluate(c, os.path.join(tmp, "sweep"))
      alone = loop.train_and_evaluate(sweep.member_config(c, ms[i]),
                                       os.path.join(tmp, "alone"))
      entry = json.load(open(os.path.join(tmp, "sweep", "members.json")))[i]
      m_swept = metric_writer.read_metrics(
          os.path.join(tmp, "sweep", entry["dir"]))
      m_alone = metric_writer.read_metrics(os.path.join(tmp, "alone"))
    for path, a in jax.tree_util.tree_leaves_with_path(swept.params):
      name = jax.tree_util.keystr(path)
      if "['key']['bias']" in name:
        # Softmax is shift-invariant per query, so the key bias has an
        # exactly-zero gradient; Adam turns its float noise (~1e-9, below
        # eps = 1e-8) into updates of up to 0.1 lr that depend on summation
        # order. It never changes the outputs.
        continue
      b = dict(jax.tree_util.tree_leaves_with_path(alone.params))[path]
      np.testing.assert_allclose(a[i], b, rtol=2e-5, atol=2e-6,
                                 err_msg=name)
    self.assertEqual(set(m_swept), set(m_alone))
    for key, (steps, values) in m_alone.items():
      if key == "steps_per_sec":
        continue
      np.testing.assert_array_equal(m_swept[key][0], steps)
      atol = 0.13 if key.endswith("rho") else 1e-4   # rho: counts over B=8
      np.testing.assert_allclose(m_swept[key][1], values, rtol=1e-4,
                                 atol=atol, err_msg=key)
    # The members really differ (seeds and kappa2 reach the step).
    self.assertGreater(float(np.abs(swept.params["output"]["kernel"][0]
                                    - swept.params["output"]["kernel"][2]
                                    ).max()), 1e-3)


class PlanTest(absltest.TestCase):

  def test_a_sweep(self):
    c = testutil.get_config("theory_task", "smoke")       # 3 members, zipped
    plan = sweep.make_plan(c)
    self.assertIs(plan.config, c)
    self.assertEqual(plan.members, tuple(sweep.members(c)))
    self.assertEqual(plan.names[1], "kappa1=100,kappa2=1,target=1")
    self.assertTrue(plan.vmapped)
    n = jax.device_count()
    self.assertEqual(plan.layout, sweep.layout(3, n, n > 1))
    self.assertEqual(plan.mesh.devices.size, n)

  def test_a_single_run_and_a_sweep_of_one(self):
    c = training_fixtures.single_theory()
    plan = sweep.make_plan(c)
    self.assertEqual((plan.names, plan.vmapped), (("run",), False))
    self.assertEqual((plan.layout.members, plan.layout.groups), (1, 1))
    self.assertEqual(plan.mesh.axis_names, ("data",))
    c.sweep.kappa2 = (0.5,)          # swept, with one value: stacked
    plan = sweep.make_plan(c)
    self.assertEqual((plan.names, plan.vmapped), (("kappa2=0.5",), True))


if __name__ == "__main__":
  absltest.main()
