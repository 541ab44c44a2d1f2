"""qkspec.training.step: the update's checks, and compiling a run's programs
on threads (`compile_ahead`)."""
import collections
from concurrent import futures
import logging
import os
import shutil
import tempfile

from absl.testing import absltest
import jax
import numpy as np
import optax

from qkspec.training import loop
from qkspec.training import step as step_lib
import testutil

PROGRAMS = ("jit(real_members)", "jit(train_many)", "jit(eval_many)")


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
