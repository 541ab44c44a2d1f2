"""qkspec.training.checkpoint: saving and restoring (resuming whole runs:
tests/training/loop_test.py)."""
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp

from qkspec.theory import locater
from qkspec.training import checkpoint
from qkspec.training import step as step_lib
from qkspec.training import sweep
import testutil


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
      sharding = jax.NamedSharding(
          sweep.make_mesh(sweep.layout(1, jax.device_count())), jax.P())
      abstract = checkpoint.abstract_like(jax.eval_shape(lambda: state),
                                          sharding)
      restored, meta = ckpt.restore(3, abstract)
      ckpt.close()
    testutil.assert_trees_equal(restored, state)
    self.assertEqual(meta, {"step": 3, "data_position": 3})


if __name__ == "__main__":
  absltest.main()
