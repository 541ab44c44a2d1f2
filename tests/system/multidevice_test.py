"""Data parallelism and sharded sweep members on simulated CPU devices equal
1 device.

The CPU device count is fixed when the backend starts and is process-wide:
setting it at import time would leak into every test that pytest (or a
pytest-xdist worker) collects into the same process. So `RunInOwnProcess`
re-runs this file in a fresh interpreter with QKSPEC_MULTIDEVICE_CHILD=1,
where `jax_num_cpu_devices = 4` is set before any device is touched and
`MultiDeviceTest` runs. The child writes what it measured (losses, params,
steps) to the JSON file named by QKSPEC_MULTIDEVICE_RESULT, and the parent
compares those numbers itself: a child that ran nothing, or ran on one
device, cannot pass.
"""
import json
import os
import subprocess
import sys
import tempfile

import jax

_CHILD = os.environ.get("QKSPEC_MULTIDEVICE_CHILD") == "1"
if _CHILD:     # this file run as a script, without conftest.py
  jax.config.update("jax_num_cpu_devices", 4)
  import testutil  # pylint: disable=g-import-not-at-top
  testutil.configure_jax()

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl.testing import absltest
import numpy as np

from qkspec.training import loop
from qkspec.training import step as step_lib
from qkspec.training import sweep
import testutil
import training_fixtures
# pylint: enable=g-import-not-at-top,wrong-import-position

_RESULT = "QKSPEC_MULTIDEVICE_RESULT"


def _plan(config, n):
  """The plan of `config` on the first `n` devices."""
  return sweep.make_plan(config, jax.devices()[:n])


def _sweep_run(config, devices, singles, many):
  """A sweep's losses [steps][N], final params (the real members) and the
  rows of the member axis each device holds on the first `devices`:
  `singles` single steps, then `many` steps in one `train_many` call."""
  steps, state, dropout_keys = training_fixtures.initialized(
      config, jax.devices()[:devices])
  losses = []
  for step in range(singles):
    state, m = steps.train(state, steps.task.train_batch(step), dropout_keys)
    losses.append(np.asarray(m["loss"]).tolist())
  if many:
    feed = steps.task.feed
    state, m = steps.train_many(state, feed.consts,
                                feed.train_inputs(singles, many), dropout_keys)
    losses += np.asarray(m["loss"]).tolist()
  leaf = jax.tree.leaves(state.params)[0]
  rows = sorted({(s.index[0].start or 0, s.index[0].stop or leaf.shape[0])
                 for s in leaf.addressable_shards})
  return dict(losses=losses, params=_params(steps.real(state)), rows=rows,
              spec=str(tuple(leaf.sharding.spec)))


def _run(config, devices, num_steps):
  steps, state, dropout_key = training_fixtures.initialized(
      config, jax.devices()[:devices])
  metrics, shards = [], []
  for step in range(num_steps):
    batch = steps.task.train_batch(step)
    shards.append(len(batch["inputs"].sharding.device_set))
    state, m = steps.train(state, batch, dropout_key)
    metrics.append(jax.device_get(m))
  return jax.device_get(state), metrics, shards, steps


def _record(**values):
  """Adds `values` to the child's JSON result file."""
  path = os.environ[_RESULT]
  result = {}
  if os.path.exists(path):
    with open(path) as f:
      result = json.load(f)
  result.update(values)
  with open(path, "w") as f:
    json.dump(result, f)


def _params(state):
  """{path: flat list} of the params, without the key bias (see below)."""
  return {jax.tree_util.keystr(path): np.ravel(a).tolist()
          for path, a in jax.tree_util.tree_leaves_with_path(state.params)
          # A zero-gradient parameter whose Adam noise depends on summation
          # order (tests/training/sweep_test.py).
          if "['key']['bias']" not in jax.tree_util.keystr(path)}


def _record_members(name, config, devices):
  """Records `_sweep_run` of `config` on `devices` devices (members
  sharded; 2 single steps, then 2 in a scan) and on 1 (4 single steps)."""
  _record(**{f"members_{name}": _sweep_run(config, devices, 2, 2),
             f"members_{name}_1": _sweep_run(config, 1, 4, 0)})


def _restore_on_one_device(config, workdir):
  """The newest checkpoint of `workdir`, restored onto 1 device."""
  from qkspec.training import checkpoint  # pylint: disable=g-import-not-at-top
  plan = _plan(config, 1)
  steps = step_lib.build_steps(plan)
  init_keys, _, hparams = step_lib.member_inputs(plan)
  abstract = checkpoint.abstract_like(
      jax.eval_shape(steps.init, init_keys, hparams), steps.replicated)
  ckpt = checkpoint.Checkpointer(workdir)
  try:
    return ckpt.restore_newest(abstract)[1]
  finally:
    ckpt.close()


class RunInOwnProcess(absltest.TestCase):

  def test_multidevice_tests_pass_in_a_fresh_process(self):
    if _CHILD:
      self.skipTest("this is the child process")
    with tempfile.TemporaryDirectory() as tmp:
      path = os.path.join(tmp, "result.json")
      env = {**os.environ, "QKSPEC_MULTIDEVICE_CHILD": "1", _RESULT: path,
             "PYTHONPATH": os.pathsep.join(   # testutil, above this folder
                 [str(testutil.ROOT / "tests")]
                 + os.environ.get("PYTHONPATH", "").split(os.pathsep))}
      r = subprocess.run([sys.executable, os.path.abspath(__file__)],
                         env=env, capture_output=True, text=True, timeout=900,
                         check=False)
      out = r.stdout[-4000:] + r.stderr[-8000:]
      self.assertEqual(r.returncode, 0, out)
      self.assertTrue(os.path.exists(path), f"the child wrote no result\n{out}")
      with open(path) as f:
        res = json.load(f)
    # Train steps on 4 devices (the batch split over all 4) equal 1 device.
    self.assertEqual(res["device_count"], 4)
    self.assertEqual(res["shards_4"], [4, 4, 4])
    self.assertEqual(res["shards_1"], [1, 1, 1])
    for key in ("loss", "penalty"):
      self.assertLen(res[f"{key}_4"], 3)
      np.testing.assert_allclose(res[f"{key}_4"], res[f"{key}_1"], rtol=1e-5,
                                 err_msg=key)
    self.assertTrue(np.all(np.asarray(res["penalty_4"]) > 0))  # kappa2 = 1
    self.assertEqual(set(res["params_4"]), set(res["params_1"]))
    self.assertGreater(len(res["params_4"]), 5)
    for name, a in res["params_4"].items():
      np.testing.assert_allclose(a, res["params_1"][name], rtol=1e-5,
                                 atol=1e-6, err_msg=name)
    # Eval sums over the sharded batch count every token once.
    self.assertEqual(res["eval_weight_4"], 8 * 8)
    # train_and_evaluate on 4 devices: a 3-member sweep to step 4, its
    # members sharded (padded to 4); its checkpoint holds the 3 real
    # members and restores on 1 device; a batch that does not split over
    # the devices that share it fails before training.
    self.assertEqual(res["train_and_evaluate_steps"], [4, 4, 4])
    self.assertEqual(res["train_and_evaluate_layout"],
                     [[3, 4, 1], "('members',)"])
    self.assertEqual(res["restored_steps"], [4, 4, 4])
    self.assertEqual(res["restored_params"], res["trained_params"])
    self.assertRegex(res["bad_batch_error"], r"data.batch_size=6 .* 4 devices")
    # Members sharded, each batch is split over its group's devices only.
    self.assertEqual(res["sharded_batch_6_layout"], [3, 4, 1])
    # Sweep members sharded over the devices (padded with copies of the
    # last member) train as on 1 device, by single steps and in a scan.
    cases = [("lm", [[0, 2], [2, 4], [4, 6], [6, 8]])]
    if testutil.SLOW:
      cases.append(("theory", [[0, 2], [2, 4]]))
    for name, rows in cases:
      sharded, alone = res[f"members_{name}"], res[f"members_{name}_1"]
      self.assertEqual(sharded["spec"], "('members',)", name)
      self.assertEqual(sharded["rows"], rows, name)     # not replicated
      self.assertEqual(alone["rows"], [[0, len(alone["losses"][0])]], name)
      self.assertLen(sharded["losses"], 4)
      np.testing.assert_allclose(sharded["losses"], alone["losses"],
                                 rtol=1e-5, err_msg=name)
      self.assertEqual(set(sharded["params"]), set(alone["params"]))
      for key, a in sharded["params"].items():
        np.testing.assert_allclose(a, alone["params"][key], rtol=1e-5,
                                   atol=1e-6, err_msg=f"{name} {key}")


class MultiDeviceTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if not _CHILD:
      self.skipTest("runs in a child process (RunInOwnProcess)")

  def test_four_devices_equal_one(self):
    c = testutil.get_config("locater_wt2", "smoke")   # dropout 0.1 on
    c.sweep.kappa2 = ()
    c.locater.kappa2 = 1.0
    s4, m4, shards4, steps4 = _run(c, 4, 3)
    s1, m1, shards1, _ = _run(c, 1, 3)
    batch = steps4.task.train_batch(7)
    e4 = jax.device_get(steps4.eval(s4.params, batch))
    _record(device_count=jax.device_count(), shards_4=shards4,
            shards_1=shards1,
            loss_4=[float(m["loss"]) for m in m4],
            loss_1=[float(m["loss"]) for m in m1],
            penalty_4=[float(m["penalty"]) for m in m4],
            penalty_1=[float(m["penalty"]) for m in m1],
            params_4=_params(s4), params_1=_params(s1),
            eval_weight_4=float(e4["weight"]))

  def test_train_and_evaluate_on_four_devices(self):
    config = testutil.get_config("theory_task", "smoke")
    plan = sweep.make_plan(config)
    steps = step_lib.build_steps(plan)
    with tempfile.TemporaryDirectory() as tmp:
      state = loop.train_and_evaluate(config, tmp)
      restored = _restore_on_one_device(config, tmp)
    bad = testutil.get_config("theory_task", "smoke")
    bad.data.batch_size = 6
    bad.sweep.shard_members = False
    with self.assertRaises(ValueError) as caught:
      loop.train_and_evaluate(bad, "/nonexistent/never/written")
    bad.sweep.shard_members = None   # sharded: a group of 1 device per batch
    split = loop._setup(bad, "/nonexistent/never/written").plan.layout
    _record(train_and_evaluate_steps=np.asarray(state.step).tolist(),
            train_and_evaluate_layout=[list(plan.layout),
                                       str(tuple(steps.state_sharding.spec))],
            restored_steps=np.asarray(restored.step).tolist(),
            restored_params=_params(restored), trained_params=_params(state),
            bad_batch_error=str(caught.exception),
            sharded_batch_6_layout=list(split))

  def test_sharded_members_equal_one_device(self):
    # 5 LM members on 4 devices (2 a device, padded to 8) against 1 device.
    _record_members("lm", testutil.get_config("locater_wt2", "smoke"), 4)

  @testutil.slow("3 theory members on 2 devices against 1")
  def test_padded_theory_members_equal_one_device(self):
    _record_members("theory", testutil.get_config("theory_task", "smoke"), 2)


if __name__ == "__main__":
  absltest.main()
