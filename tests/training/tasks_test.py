"""Tests for qkspec.training.tasks: the LM loss and its gradients."""
# pylint: disable=invalid-name
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import defaults as common
import training_fixtures


B, T, d, V = 2, 8, 16, 50


class LossTest(absltest.TestCase):

  def test_loss_gradients_equal_those_of_the_logits(self):
    c = common.lm_config()
    c.model.update(d_model=d, ffn_dim=d, num_layers=2)
    task = training_fixtures.lm_task(c.model, V)
    k1, k2 = jax.random.split(jax.random.key(7))
    tokens = jax.random.randint(k1, (B, T), 0, V)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1),
             "weights": (jax.random.uniform(k2, (B, T)) > 0.3) * 1.0}
    params = task.model.init(jax.random.key(8), tokens)["params"]
    grads = [jax.jit(jax.grad(lambda p: task.summed_loss(
        p, batch, deterministic=True)[0]))(params),
             jax.jit(jax.grad(
                 lambda p: training_fixtures.plain_loss(task, p, batch)[0]))(
                     params)]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4,
                                                         atol=1e-6), *grads)


if __name__ == "__main__":
  absltest.main()
