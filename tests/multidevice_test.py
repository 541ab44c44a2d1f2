"""Data parallelism on 4 simulated CPU devices equals 1 device.

The CPU device count is fixed when the backend starts and is process-wide:
setting it at import time would leak into every test that pytest (or a
pytest-xdist worker) collects into the same process. So `RunInOwnProcess`
re-runs this file in a fresh interpreter with QKSPEC_MULTIDEVICE_CHILD=1,
where `jax_num_cpu_devices = 4` is set before any device is touched and
`MultiDeviceTest` runs.
"""
import os
import subprocess
import sys
import tempfile

import jax

_CHILD = os.environ.get("QKSPEC_MULTIDEVICE_CHILD") == "1"
if _CHILD:
  jax.config.update("jax_num_cpu_devices", 4)
jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_compilation_cache_dir", os.path.join(
    tempfile.gettempdir(), "qkspec_test_jax_cache"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.3)

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl.testing import absltest
import numpy as np

from qkspec.training import sweep
from qkspec.training import loop
import testutil
# pylint: enable=g-import-not-at-top,wrong-import-position


def _mesh(n):
  return jax.sharding.Mesh(np.array(jax.devices()[:n]), ("data",),
                           axis_types=(jax.sharding.AxisType.Auto,))


def _run(config, mesh, num_steps):
  steps = loop.build_steps(config, mesh)
  member = sweep.members(config)[0]
  init_key, dropout_key = loop.member_keys(member["seed"])
  state = steps.init(init_key, sweep.hparams(member))
  metrics = []
  for step in range(num_steps):
    batch = steps.task.train_batch(step)
    if step == 0:
      assert len(batch["inputs"].sharding.device_set) == mesh.size
    state, m = steps.train(state, batch, dropout_key)
    metrics.append(jax.device_get(m))
  return jax.device_get(state), metrics, steps


class RunInOwnProcess(absltest.TestCase):

  def test_multidevice_tests_pass_in_a_fresh_process(self):
    if _CHILD:
      self.skipTest("this is the child process")
    env = {**os.environ, "QKSPEC_MULTIDEVICE_CHILD": "1"}
    r = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                       capture_output=True, text=True, timeout=900,
                       check=False)
    out = r.stdout[-4000:] + r.stderr[-8000:]
    self.assertEqual(r.returncode, 0, out)
    self.assertIn("Ran 3 tests", r.stderr, out)
    self.assertIn("OK (skipped=1)", r.stderr, out)


class MultiDeviceTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if not _CHILD:
      self.skipTest("runs in a child process (RunInOwnProcess)")

  def test_four_devices_equal_one(self):
    self.assertEqual(jax.device_count(), 4)
    c = testutil.get_config("locater_wt2", "smoke")   # dropout 0.1 on
    c.sweep.kappa2 = ()
    c.locater.kappa2 = 1.0
    s4, m4, steps4 = _run(c, _mesh(4), 3)
    s1, m1, _ = _run(c, _mesh(1), 3)
    for a, b in zip(m4, m1):
      np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
      np.testing.assert_allclose(a["penalty"], b["penalty"], rtol=1e-5)
    for path, a in jax.tree_util.tree_leaves_with_path(s4.params):
      if "['key']['bias']" in jax.tree_util.keystr(path):
        continue   # zero-gradient parameter, see tests/sweep_test.py
      b = dict(jax.tree_util.tree_leaves_with_path(s1.params))[path]
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6,
                                 err_msg=jax.tree_util.keystr(path))
    # Eval sums over the sharded batch equal the single-device ones.
    batch = steps4.task.train_batch(7)
    e4 = jax.device_get(steps4.eval(s4.params, batch))
    self.assertEqual(float(e4["weight"]), 8 * 8)

  def test_train_and_evaluate_on_four_devices(self):
    with tempfile.TemporaryDirectory() as tmp:
      state = loop.train_and_evaluate(
          testutil.get_config("theory_task", "smoke"), tmp)
    self.assertEqual(int(state.step[0]), 4)
    bad = testutil.get_config("theory_task", "smoke")
    bad.data.batch_size = 6
    with self.assertRaisesRegex(ValueError, r"data.batch_size=6 .* 4 devices"):
      loop.train_and_evaluate(bad, "/nonexistent/never/written")


if __name__ == "__main__":
  absltest.main()
