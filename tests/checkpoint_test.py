"""qkspec.training.checkpoint, and resuming qkspec.training.loop runs."""
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import locater
from qkspec.training import checkpoint
from qkspec.training import loop
from qkspec.training import metric_writer
from qkspec.training import step as step_lib
from qkspec.training import sweep
from qkspec.training import tasks
import testutil

# Reruns of the same steps (straight vs resumed) hit the compilation cache.


def _assert_trees_equal(a, b):
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(
      np.asarray(x), np.asarray(y)), a, b)


class CheckpointerTest(absltest.TestCase):

  def test_save_restore_round_trip(self):
    state = step_lib.TrainState(
        step=jnp.int32(3), params={"w": jnp.arange(6.0).reshape(2, 3)},
        opt_state=(jnp.ones(2),),
        hparams=locater.LocaterHParams(*jnp.float32([0.0, 0.5, 1.0])))
    with tempfile.TemporaryDirectory() as tmp:
      ckpt = checkpoint.Checkpointer(tmp, max_to_keep=2)
      self.assertIsNone(ckpt.latest_step())
      for s in (1, 2, 3):
        ckpt.save(s, state)
      ckpt.wait_until_finished()
      self.assertEqual(ckpt.all_steps(), [2, 3])          # max_to_keep
      self.assertFalse(ckpt.save(3, state))   # already there
      sharding = jax.NamedSharding(step_lib.make_mesh(), jax.P())
      abstract = checkpoint.abstract_like(jax.eval_shape(lambda: state),
                                          sharding)
      restored, meta = ckpt.restore(3, abstract)
      ckpt.close()
    _assert_trees_equal(restored, state)
    self.assertEqual(meta, {"step": 3, "data_position": 3})


class ResumeTest(absltest.TestCase):

  def test_resumed_sweep_is_bit_identical_to_uninterrupted(self):
    # An LM sweep (two members, dropout 0.1): 2N steps straight vs N, stop,
    # restart in the same workdir, continue to 2N.
    cfg = testutil.get_config("rho_training", "smoke")
    cfg.num_steps = 4
    cfg.checkpoint_every = 2
    cfg.eval_every = 4
    with tempfile.TemporaryDirectory() as tmp:
      straight = loop.train_and_evaluate(cfg, os.path.join(tmp, "a"))
      half = testutil.get_config("rho_training", "smoke")
      half.num_steps = 2
      half.checkpoint_every = 2
      half.eval_every = 4
      wd = os.path.join(tmp, "b")
      loop.train_and_evaluate(half, wd)
      self.assertEqual(checkpoint.Checkpointer(wd).all_steps(), [2])
      resumed = loop.train_and_evaluate(cfg, wd)
      self.assertEqual(checkpoint.Checkpointer(wd).latest_step(), 4)
      m = metric_writer.read_metrics(os.path.join(wd, "kappa1=100,kappa2=1"))
      np.testing.assert_array_equal(m["train/loss"][0], [2, 4])
    self.assertEqual(int(resumed.step[0]), 4)
    _assert_trees_equal(resumed.params, straight.params)
    _assert_trees_equal(resumed.opt_state, straight.opt_state)

  @testutil.slow("a run trained and its checkpoint rewritten in the older "
                 "layout")
  def test_resumes_a_checkpoint_with_the_old_dict_hparams(self):
    # Checkpoints written before TrainState.hparams became a LocaterHParams
    # held a {"kappa1", "kappa2", "target"} dict. Rewrite a checkpoint in
    # that layout, resume from it: bit-identical to an uninterrupted run.
    cfg = testutil.get_config("theory_task", "smoke")      # 3-member sweep
    half = testutil.get_config("theory_task", "smoke")
    half.num_steps = 2
    with tempfile.TemporaryDirectory() as tmp:
      straight = loop.train_and_evaluate(cfg, os.path.join(tmp, "a"))
      wd = os.path.join(tmp, "b")
      loop.train_and_evaluate(half, wd)
      steps = step_lib.build_steps(half)
      init_keys, _, hparams = step_lib.member_inputs(sweep.members(half),
                                                     True)
      abstract = checkpoint.abstract_like(
          jax.eval_shape(steps.init, init_keys, hparams), steps.replicated)
      ckpt = checkpoint.Checkpointer(wd)
      state, _ = ckpt.restore(2, abstract)
      ckpt.close()
      old = state.replace(hparams=dict(state.hparams._asdict()))
      self.assertEqual(sorted(old.hparams), ["kappa1", "kappa2", "target"])
      shutil.rmtree(os.path.join(wd, "ckpt"))
      ckpt = checkpoint.Checkpointer(wd)
      ckpt.save(2, old)
      ckpt.close()
      resumed = loop.train_and_evaluate(cfg, wd)
    self.assertIsInstance(resumed.hparams, locater.LocaterHParams)
    np.testing.assert_array_equal(resumed.hparams.target, [1.0, 1.0, 12.0])
    self.assertEqual(int(resumed.step[0]), 4)
    _assert_trees_equal(resumed.params, straight.params)
    _assert_trees_equal(resumed.opt_state, straight.opt_state)

  def test_keyboard_interrupt_saves_a_checkpoint(self):
    cfg = testutil.get_config("theory_task", "smoke")
    cfg.num_steps = 8
    cfg.checkpoint_every = 100
    real = tasks.make_task

    def interrupting(config, sharding):
      task = real(config, sharding)
      def batch(step):
        if step == 3:
          raise KeyboardInterrupt
        return task.train_batch(step)
      return tasks.Task(**{**task.__dict__, "train_batch": batch})

    with tempfile.TemporaryDirectory() as tmp:
      with mock.patch.object(tasks, "make_task", interrupting):
        with self.assertRaises(KeyboardInterrupt):
          loop.train_and_evaluate(cfg, tmp)
      self.assertEqual(checkpoint.Checkpointer(tmp).all_steps(), [3])
      resumed = loop.train_and_evaluate(cfg, tmp)        # resumes at 3
      self.assertEqual(int(resumed.step[0]), 8)


if __name__ == "__main__":
  absltest.main()
