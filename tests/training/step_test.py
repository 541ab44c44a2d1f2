"""qkspec.training.step: the update's checks, the objective, and compiling
a run's programs on threads (`compile_ahead`)."""
# pylint: disable=invalid-name
import collections
from concurrent import futures
import logging
import os
import shutil
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
import optax

from qkspec.config import defaults as common
from qkspec.theory import locater
from qkspec.training import loop
from qkspec.training import model as model_lib
from qkspec.training import step as step_lib
import testutil
import training_fixtures

PROGRAMS = ("jit(real_members)", "jit(train_many)", "jit(eval_many)")
B, T, d, V = 2, 8, 16, 50


class UpdateChecksTest(absltest.TestCase):

  def test_a_gradient_not_finite_is_flagged_with_a_finite_loss(self):
    # "c" is large enough to be summed by itself, "a" and "b" flat.
    big = step_lib.FLAT_NORM_MAX
    grads = {"a": np.ones((3, 4), np.float32), "b": np.full(5, 2.0,
                                                            np.float32),
             "c": np.full((2, big // 2), 0.5, np.float32)}
    finite, norm = step_lib.update_checks(np.float32(1.0), grads)
    self.assertTrue(finite)
    np.testing.assert_allclose(norm, np.sqrt(12 + 20 + big / 4), rtol=1e-6)
    np.testing.assert_allclose(norm, optax.tree.norm(grads), rtol=1e-6)
    for leaf in ("b", "c"):
      for bad in (np.nan, np.inf, -np.inf, 1e20):   # 1e20: norm overflows
        g = grads[leaf].copy()
        g.reshape(-1)[3] = bad
        self.assertFalse(step_lib.update_checks(
            np.float32(1.0), {**grads, leaf: g})[0], (leaf, bad))
    self.assertFalse(step_lib.update_checks(np.float32(np.nan), grads)[0])


class ObjectiveTest(absltest.TestCase):

  def test_locater_term_equals_locater_penalty_of_qk_matrices(self):
    c = common.lm_config()
    common.synthetic_data(c)
    c.model.update(d_model=d, ffn_dim=d, num_layers=3, num_heads=2)
    m = model_lib.make_model(c.model, "lm", V)
    tokens = jnp.zeros((B, T), jnp.int32)
    params = m.init(jax.random.key(6), tokens)["params"]
    hp = locater.LocaterHParams(kappa1=jnp.float32(100.0),
                                kappa2=jnp.float32(0.1),
                                target=jnp.float32(1.0))
    w = model_lib.qk_matrices(params)
    want = 0.0
    for l in range(3):
      for h in range(2):
        want += locater.locater_penalty(w[l, h], 100.0, 0.1, 1.0)
    np.testing.assert_allclose(step_lib.locater_term(params, hp), want,
                               rtol=1e-6)
    # The training objective is loss + that term.
    task = training_fixtures.lm_task(c.model, V)
    batch = {"inputs": tokens, "targets": tokens + 1}
    key = jax.random.key(0)
    total, (loss, pen) = step_lib.objective(params, hp, batch, key,
                                            task=task, deterministic=True)
    np.testing.assert_allclose(pen, want, rtol=1e-6)
    np.testing.assert_allclose(total, loss + want, rtol=1e-6)
    # The loss inside the model equals the cross-entropy of its logits.
    np.testing.assert_allclose(
        training_fixtures.plain_loss(task, params, batch)[0] / (B * T), loss,
        rtol=1e-5)


class WarmTest(absltest.TestCase):

  def test_first_call_waits_for_its_compiles_then_calls(self):
    calls, order = [], []
    done = futures.Future()
    done.add_done_callback(lambda _: order.append("compiled"))
    fn = lambda x: calls.append(x) or order.append("called") or 2 * x  # noqa: E731
    fn.lower = "the function's attribute"
    warm = step_lib.Warm(fn, [done])
    pool = futures.ThreadPoolExecutor(1)
    self.addCleanup(pool.shutdown)
    pool.submit(lambda: done.set_result(None))
    self.assertEqual(warm(3), 6)
    self.assertEqual(warm(4), 8)
    self.assertEqual(order, ["compiled", "called", "called"])
    self.assertEqual(warm.lower, "the function's attribute")

  def test_a_workers_error_is_raised_by_the_first_call_only(self):
    failed = futures.Future()
    failed.set_exception(RuntimeError("lowering failed"))
    warm = step_lib.Warm(lambda: "ran", [failed])
    with self.assertRaisesRegex(RuntimeError, "lowering failed"):
      warm()
    self.assertEqual(warm(), "ran")


class _Compiles(logging.Handler):
  """(program, thread) of each XLA compilation that jax logs."""

  def __init__(self):
    super().__init__()
    self.seen = []

  def emit(self, record):
    msg = record.getMessage()
    if msg.startswith("Finished XLA compilation of "):
      name = msg.removeprefix("Finished XLA compilation of ").split()[0]
      self.seen.append((name, record.threadName))


def _config(num_steps: int, precompile_on: bool):
  """The LM smoke sweep (5 members, a device feed): 2 steps per call, a
  log every 2 steps, evaluation and checkpoint every 4."""
  c = testutil.get_config("locater_wt2", "smoke")
  c.update_from_flattened_dict(
      {"num_steps": num_steps, "steps_per_call": 2, "log_every": 2,
       "eval_every": 4, "checkpoint_every": 4, "progress_every_s": 0.0,
       "precompile": precompile_on})
  return c


@testutil.slow("three runs of the LM sweep, their compilations logged")
class LoopTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.root = tempfile.mkdtemp()
    self.addCleanup(shutil.rmtree, self.root, ignore_errors=True)
    self.compiles = _Compiles()
    jax_logger = logging.getLogger("jax")
    jax_logger.addHandler(self.compiles)
    self.addCleanup(jax_logger.removeHandler, self.compiles)
    before = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)   # every thread's
    self.addCleanup(jax.config.update, "jax_log_compiles", before)

  def _ours(self) -> collections.Counter:
    got = collections.Counter(
        (name, thread.startswith("precompile")) for name, thread in
        self.compiles.seen if name in PROGRAMS)
    self.compiles.seen.clear()
    return got

  def test_workers_compile_each_program_once_and_the_run_is_the_same(self):
    plain = os.path.join(self.root, "plain")
    want = loop.train_and_evaluate(_config(8, False), plain)
    self.assertEqual(self._ours(), {(p, False): 1 for p in PROGRAMS})

    warm = os.path.join(self.root, "warm")
    got = loop.train_and_evaluate(_config(4, True), warm)
    self.assertEqual(self._ours(), {(p, True): 1 for p in PROGRAMS})
    got = loop.train_and_evaluate(_config(8, True), warm)   # resumed at 4
    self.assertEqual(self._ours(), {(p, True): 1 for p in PROGRAMS})

    jax.tree.map(np.testing.assert_array_equal, jax.device_get(got),
                 jax.device_get(want))
    self.assertEqual(
        *(testutil.metric_records(os.path.join(wd, "kappa2=1"))
          for wd in (warm, plain)))


if __name__ == "__main__":
  absltest.main()
