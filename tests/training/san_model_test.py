"""Tests for qkspec.training.san_model: the Flax SAN is qkspec.theory.san."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import san
from qkspec.training import san_model
import training_fixtures


class FlaxSanTest(absltest.TestCase):

  def test_the_flax_model_is_the_pure_san(self):
    c = training_fixtures.sorting_config(1)
    tc = c.model
    model = san_model.make_classifier(tc, 4, 4, 3.0)
    tokens = jnp.array([[0, 3, 1, 2], [2, 2, 0, 1]], jnp.int32)
    params = jax.jit(model.init)(jax.random.key(0), tokens)["params"]
    sp = san_model.san_params(params)
    x = san_model.embed(params, tokens)
    arch = san_model.architecture(tc)
    self.assertEqual(arch, san.Architecture(skip=True, mlp=True))
    ref = jax.vmap(lambda xi: san.forward(sp, xi, arch, 3.0)["outputs"][-1])(x)
    np.testing.assert_allclose(jax.jit(model.apply)({"params": params}, tokens),
                               san_model.readout(params, ref), rtol=1e-5,
                               atol=1e-5)


if __name__ == "__main__":
  absltest.main()
