"""k steps per call equal the one-step path.

qkspec.training.multi_step scans k steps (or a split's eval batches) in one
call, the batches gathered on the device (qkspec.training.device_feed,
tests/training/device_feed_test.py). On a CPU it must equal the host-batch,
one-step path bit for bit: same batches, same arithmetic in the same order.
"""
import os
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.training import loop
from qkspec.training import multi_step
from qkspec.training import step as step_lib
from qkspec.training import sweep
import testutil
import training_fixtures


def _leaves_equal(test, a, b):
  test.assertEqual(jax.tree.structure(a), jax.tree.structure(b))
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    test.assertEqual(np.asarray(x).dtype, np.asarray(y).dtype)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


class ScanTest(parameterized.TestCase):
  """k steps in one scan == k dispatched steps, bit for bit (CPU)."""

  @parameterized.named_parameters(
      ("lm_sweep", "lm", (0.0, 1.0)),
      ("lm_sweep_bfloat16", "lm_bf16", (0.0, 1.0)),
      ("lm_sweep_bfloat16_pallas", "lm_bf16_pallas", (0.0, 1.0)),
      ("theory_single", "theory", ()))
  def test_scan_equals_single_steps(self, task, kappa2):
    if task == "lm":
      testutil.skip_unless_slow(self, "the LM scan in float32; the bfloat16 "
                                "case runs the same scan with weight copies")
    if task.startswith("lm"):
      c = training_fixtures.lm_smoke(kappa2)
      if task.startswith("lm_bf16"):  # the scan carries bf16 weight copies
        c.compute_dtype = "bfloat16"
      if task == "lm_bf16_pallas":   # the GPU path's kernels
        testutil.skip_unless_slow(self, "interpreted kernels in a scan")
        c.model.kernels = "pallas"
    else:
      c = testutil.get_config("theory_task", "smoke")
      c.sweep.kappa1, c.sweep.target = (), ()
      c.sweep.kappa2 = kappa2
    plan = sweep.make_plan(c)
    steps = step_lib.build_steps(plan)
    ik, dk, hp = step_lib.member_inputs(plan)
    singles = steps.init(ik, hp)
    scanned = jax.tree.map(jnp.copy, singles)
    k, start = 3, 0
    metrics = []
    for s in range(start, start + k):
      singles, m = steps.train(singles, steps.task.train_batch(s), dk)
      metrics.append(m)
    feed = steps.task.feed
    scanned, stacked = steps.train_many(
        scanned, feed.consts, feed.train_inputs(start, k), dk)
    _leaves_equal(self, singles, scanned)
    _leaves_equal(self, jax.tree.map(lambda *x: jnp.stack(x), *metrics),
                  stacked)
    self.assertIsNotNone(multi_step.pack_metrics(metrics[0]))   # packed
    # And the training moved: a scan that returned its input would pass
    # the equality above only if the single steps did nothing either.
    self.assertFalse(np.array_equal(
        np.asarray(jax.tree.leaves(singles.params)[0]),
        np.asarray(jax.tree.leaves(steps.init(ik, hp).params)[0])))

  def test_metrics_pack_into_one_array_and_back(self):
    m = {"loss": jnp.array([1.5, -2.25]), "finite": jnp.array([True, False]),
         "n": {"grad_norm": jnp.array([3.0, jnp.inf])}}
    packed = multi_step.pack_metrics(m)
    self.assertEqual(packed.shape, (3, 2))
    k = jnp.stack([packed, 2 * packed])           # two steps
    got = multi_step.unpack_metrics(k, m)
    _leaves_equal(self, got, jax.tree.map(
        lambda x: jnp.stack([x, (2 * x).astype(x.dtype)]), m))

  def test_eval_program_equals_per_batch_eval(self):
    c = training_fixtures.lm_smoke()
    c.eval_max_batches = 3
    plan = sweep.make_plan(c)
    steps = step_lib.build_steps(plan)
    ik, _, hp = step_lib.member_inputs(plan)
    params = steps.init(ik, hp).params
    feed = steps.task.feed
    for split, batches in steps.task.eval_splits.items():
      total = None
      for batch in batches():
        r = steps.eval(params, batch)
        total = r if total is None else jax.tree.map(jnp.add, total, r)
      n = feed.eval_counts[split]
      self.assertEqual(n, 3)
      got = steps.eval_many(params, feed.eval_tokens[split],
                            jnp.arange(n, dtype=jnp.int32))
      np.testing.assert_allclose(np.asarray(got["loss_sum"]),
                                 np.asarray(total["loss_sum"]), rtol=1e-6)
      np.testing.assert_array_equal(np.asarray(got["weight"]),
                                    np.asarray(total["weight"]))


class StepsPerCallTest(absltest.TestCase):

  def test_auto_is_one_on_cpu_and_divides_the_periods_elsewhere(self):
    c = training_fixtures.lm_smoke()
    c.log_every, c.eval_every, c.checkpoint_every = 250, 2500, 5000
    self.assertEqual(multi_step.steps_per_call(c), 1)      # this CPU
    backend = jax.default_backend
    try:
      jax.default_backend = lambda: "gpu"
      self.assertEqual(multi_step.steps_per_call(c), 250)
      c.log_every = 300                         # gcd 100
      self.assertEqual(multi_step.steps_per_call(c), 100)
      c.log_every, c.eval_every = 1000, 1000    # gcd 1000: largest <= 250
      self.assertEqual(multi_step.steps_per_call(c), 250)
      c.log_every = 7 * 64                      # gcd 64 with 5000? 8
      self.assertEqual(multi_step.steps_per_call(c), 8)
    finally:
      jax.default_backend = backend
    c.steps_per_call = 5
    self.assertEqual(multi_step.steps_per_call(c), 5)


class LoopTest(absltest.TestCase):
  """The loop with k steps per call writes what the one-step loop writes."""

  def test_chunked_run_and_resume_equal_the_single_step_run(self):
    root = tempfile.mkdtemp()

    def config(num_steps, steps_per_call):
      c = testutil.get_config("theory_task", "smoke")
      c.sweep.kappa1, c.sweep.target, c.sweep.kappa2 = (), (), (0.0, 1.0)
      c.update_from_flattened_dict(
          {"num_steps": num_steps, "log_every": 4, "eval_every": 8,
           "checkpoint_every": 8, "progress_every_s": 0.0,
           "steps_per_call": steps_per_call})
      return c

    one = os.path.join(root, "one")
    loop.train_and_evaluate(config(13, 1), one)
    many = os.path.join(root, "many")
    with self.assertLogs(level="INFO") as logs:
      loop.train_and_evaluate(config(5, 4), many)   # 0-3 scanned, 4 single
    self.assertTrue(any("first 4 steps done" in m for m in logs.output))
    state = loop.train_and_evaluate(config(13, 4), many)   # resumes at 5
    self.assertEqual(int(state.step[0]), 13)
    for member in ("kappa2=0", "kappa2=1"):
      got = {}
      for r in testutil.metric_records(os.path.join(many, member)):
        got.setdefault(r["step"], {}).update(r)
      want = testutil.metric_records(os.path.join(one, member))
      self.assertNotEmpty(want)
      for r in want:
        for k, v in r.items():
          if k == "step" or k.startswith("hparams"):
            continue
          if r["step"] == 8 and k.startswith("train/"):
            continue   # a mean since the last log, which was at 5 there
          self.assertIn(k, got[r["step"]], (r["step"], k))
          np.testing.assert_array_equal(got[r["step"]][k], v,
                                        err_msg=f"step {r['step']} {k}")


if __name__ == "__main__":
  absltest.main()
