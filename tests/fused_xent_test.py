"""The fused chunked cross-entropy equals the plain one in value and gradient."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from qkspec.training import fused_xent

jax.config.update("jax_numpy_rank_promotion", "raise")
# Full float32 matmuls: these tests compare algorithms, and GPUs otherwise
# round matmul inputs to TF32 (seen on an H200: 1e-3 gradient differences).
jax.config.update("jax_default_matmul_precision", "highest")


def _plain(h, kernel, bias, targets, weights):
  logits = h @ kernel + (0.0 if bias is None else bias[None, :])
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
  return jnp.sum(weights * ce)


def _inputs(n=37, d=8, v=50, seed=0):
  ks = jax.random.split(jax.random.key(seed), 5)
  h = jax.random.normal(ks[0], (n, d))
  kernel = jax.random.normal(ks[1], (d, v)) * 0.5
  bias = jax.random.normal(ks[2], (v,)) * 0.1
  targets = jax.random.randint(ks[3], (n,), 0, v)
  weights = (jax.random.uniform(ks[4], (n,)) > 0.2).astype(jnp.float32)
  return h, kernel, bias, targets, weights


class FusedXentTest(parameterized.TestCase):

  @parameterized.parameters(1, 8, 16, 37, 512)
  def test_value_and_grads_equal_plain(self, chunk):
    args = _inputs()
    fused = lambda h, k, b: fused_xent.fused_cross_entropy(
        h, k, b, args[3], args[4], chunk)
    plain = lambda h, k, b: _plain(h, k, b, args[3], args[4])
    v1, g1 = jax.jit(jax.value_and_grad(fused, (0, 1, 2)))(*args[:3])
    v2, g2 = jax.value_and_grad(plain, (0, 1, 2))(*args[:3])
    np.testing.assert_allclose(v1, v2, rtol=1e-5)
    for a, b in zip(g1, g2):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

  @parameterized.parameters(1, 16, 37)
  def test_without_bias(self, chunk):
    h, kernel, _, targets, weights = _inputs(seed=3)
    fused = lambda h, k: fused_xent.fused_cross_entropy(
        h, k, None, targets, weights, chunk)
    plain = lambda h, k: _plain(h, k, None, targets, weights)
    v1, g1 = jax.jit(jax.value_and_grad(fused, (0, 1)))(h, kernel)
    v2, g2 = jax.value_and_grad(plain, (0, 1))(h, kernel)
    np.testing.assert_allclose(v1, v2, rtol=1e-5)
    for a, b in zip(g1, g2):
      np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(fused_xent.chunked_cross_entropy(
        h, kernel, None, targets, weights, chunk), v2, rtol=1e-5)

  @parameterized.parameters(1, 16, 37)
  def test_kernel_grad_layouts_agree_with_plain(self, chunk):
    h, kernel, bias, targets, weights = _inputs(seed=5)
    plain = jax.value_and_grad(
        lambda h, k, b: _plain(h, k, b, targets, weights), (0, 1, 2))(
            h, kernel, bias)
    for layout in ("vd", "dv"):
      fused = lambda h, k, b, layout=layout: fused_xent.fused_cross_entropy(
          h, k, b, targets, weights, chunk, jnp.float32, layout)
      v, g = jax.jit(jax.value_and_grad(fused, (0, 1, 2)))(h, kernel, bias)
      np.testing.assert_allclose(v, plain[0], rtol=1e-5)
      self.assertEqual(g[1].shape, kernel.shape)
      for a, b in zip(g, plain[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    with self.assertRaisesRegex(ValueError, "kernel_grad"):
      fused_xent.fused_cross_entropy(h, kernel, bias, targets, weights, chunk,
                                     jnp.float32, "vv")

  def test_cotangent_scaling_and_eval_path(self):
    args = _inputs(seed=1)
    f = lambda h: 3.0 * fused_xent.fused_cross_entropy(h, *args[1:], 8)
    p = lambda h: 3.0 * _plain(h, *args[1:])
    np.testing.assert_allclose(jax.grad(f)(args[0]), jax.grad(p)(args[0]),
                               rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(
        fused_xent.chunked_cross_entropy(*args, chunk_size=5),
        _plain(*args), rtol=1e-5)

  def test_bfloat16_compute_is_close(self):
    args = _inputs(seed=2)
    v = fused_xent.fused_cross_entropy(*args, 16, jnp.bfloat16)
    np.testing.assert_allclose(v, _plain(*args), rtol=2e-2)

  def test_bfloat16_logits_equal_the_plain_loss_of_rounded_logits(self):
    """logits_dtype=bf16: the float32 accumulator rounded once, then the
    float32 softmax; the gradient passes the rounding straight through."""
    h, kernel, bias, targets, weights = _inputs(n=45, d=16, v=300, seed=4)
    kernel = kernel * 8.0          # logits of a few units: rounding matters

    def rounded(h, k, b):
      z = h @ k + b[None, :]
      z = z + jax.lax.stop_gradient(
          z.astype(jnp.bfloat16).astype(jnp.float32) - z)
      ce = optax.softmax_cross_entropy_with_integer_labels(z, targets)
      return jnp.sum(weights * ce)

    want = jax.value_and_grad(rounded, (0, 1, 2))(h, kernel, bias)
    exact = jax.value_and_grad(lambda h, k, b: _plain(h, k, b, targets,
                                                      weights),
                               (0, 1, 2))(h, kernel, bias)
    for chunk, layout in ((7, "vd"), (45, "dv")):
      fused = lambda h, k, b, c=chunk, l=layout: fused_xent.fused_cross_entropy(
          h, k, b, targets, weights, c, jnp.float32, l, jnp.bfloat16)
      v, g = jax.jit(jax.value_and_grad(fused, (0, 1, 2)))(h, kernel, bias)
      np.testing.assert_allclose(v, want[0], rtol=1e-5)
      for a, b in zip(g, want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
      # another arithmetic than float32 logits, but within bf16 rounding
      self.assertGreater(abs(float(v - exact[0])), 1e-6 * abs(exact[0]))
      np.testing.assert_allclose(v, exact[0], rtol=3e-3)
    np.testing.assert_allclose(fused_xent.chunked_cross_entropy(
        h, kernel, bias, targets, weights, 8, jnp.float32, jnp.bfloat16),
                               want[0], rtol=1e-5)

  def test_shape_errors(self):
    h, kernel, bias, targets, weights = _inputs()
    with self.assertRaisesRegex(ValueError, "do not match"):
      fused_xent.fused_cross_entropy(h, kernel.T, bias, targets, weights)
    with self.assertRaisesRegex(ValueError, "bias"):
      fused_xent.fused_cross_entropy(h, kernel, bias[:3], targets, weights)
    with self.assertRaisesRegex(ValueError, "targets and weights"):
      fused_xent.fused_cross_entropy(h, kernel, bias, targets[:3], weights)
    with self.assertRaisesRegex(ValueError, "chunk_size"):
      fused_xent.fused_cross_entropy(h, kernel, bias, targets, weights, 0)


if __name__ == "__main__":
  absltest.main()
