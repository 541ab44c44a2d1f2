"""qkspec.kernels.chunked_xent: the fused chunked cross-entropy equals the
plain one (optax on the whole logits) in value and gradient."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from qkspec.kernels import chunked_xent



def _plain(h, kernel, targets, weights):
  ce = optax.softmax_cross_entropy_with_integer_labels(h @ kernel, targets)
  return jnp.sum(weights * ce)


def _inputs(n=37, d=8, v=50, seed=0):
  ks = jax.random.split(jax.random.key(seed), 4)
  h = jax.random.normal(ks[0], (n, d))
  kernel = jax.random.normal(ks[1], (d, v)) * 0.5
  targets = jax.random.randint(ks[2], (n,), 0, v)
  weights = (jax.random.uniform(ks[3], (n,)) > 0.2).astype(jnp.float32)
  return h, kernel, targets, weights


class ChunkedXentTest(parameterized.TestCase):

  def test_plain_equals_a_loop_over_tokens(self):
    h, kernel, targets, weights = (np.asarray(a, np.float64)
                                   for a in _inputs(n=5, v=7))
    want = 0.0
    for n in range(5):
      z = h[n] @ kernel
      want += weights[n] * (np.log(np.sum(np.exp(z))) - z[int(targets[n])])
    np.testing.assert_allclose(_plain(h, kernel, targets.astype(int),
                                      weights), want, rtol=1e-6)

  @parameterized.parameters(1, 8, 16, 37, 512)
  def test_value_and_grads_equal_plain(self, chunk):
    h, kernel, targets, weights = _inputs()
    fused = lambda h, k: chunked_xent.fused_cross_entropy(  # noqa: E731
        h, k, targets, weights, chunk)
    plain = lambda h, k: _plain(h, k, targets, weights)  # noqa: E731
    v1, g1 = jax.jit(jax.value_and_grad(fused, (0, 1)))(h, kernel)
    v2, g2 = jax.value_and_grad(plain, (0, 1))(h, kernel)
    np.testing.assert_allclose(v1, v2, rtol=1e-5)
    for a, b in zip(g1, g2):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(chunked_xent.fused_cross_entropy(
        h, kernel, targets, weights, chunk), v2, rtol=1e-5)

  def test_cotangent_scales_the_gradients(self):
    h, kernel, targets, weights = _inputs(seed=1)
    f = lambda h: 3.0 * chunked_xent.fused_cross_entropy(  # noqa: E731
        h, kernel, targets, weights, 8)
    p = lambda h: 3.0 * _plain(h, kernel, targets, weights)  # noqa: E731
    np.testing.assert_allclose(jax.grad(f)(h), jax.grad(p)(h), rtol=1e-4,
                               atol=1e-5)

  def test_bfloat16_compute_is_close(self):
    args = _inputs(seed=2)
    v = chunked_xent.fused_cross_entropy(*args, 16, jnp.bfloat16)
    np.testing.assert_allclose(v, _plain(*args), rtol=2e-2)
    self.assertNotEqual(float(v), float(_plain(*args)))

  def test_shape_errors(self):
    h, kernel, targets, weights = _inputs()
    with self.assertRaisesRegex(ValueError, "do not match"):
      chunked_xent.fused_cross_entropy(h, kernel.T, targets, weights)
    with self.assertRaisesRegex(ValueError, "targets and weights"):
      chunked_xent.fused_cross_entropy(h, kernel, targets[:3], weights)
    with self.assertRaisesRegex(ValueError, "chunk"):
      chunked_xent.fused_cross_entropy(h, kernel, targets, weights, 0)


if __name__ == "__main__":
  absltest.main()
