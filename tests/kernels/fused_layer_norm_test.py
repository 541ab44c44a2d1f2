"""qkspec.kernels.fused_layer_norm (Pallas' interpreter on a CPU): LayerNorm(x +
mask * u) and its gradients against the float32 reference, a loop over
rows, Flax's LayerNorm after dropout, bfloat16 and vmapped members."""
from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import kernels



def _inputs(key, shape=(2, 64, 16), dtype=jnp.float32, keep=0.7):
  ks = jax.random.split(key, 5)
  d = shape[-1]
  x = jax.random.normal(ks[0], shape, dtype)
  u = jax.random.normal(ks[1], shape, dtype)
  mask = (jax.random.uniform(ks[2], shape) < keep) / keep
  scale = 1.0 + 0.1 * jax.random.normal(ks[3], (d,))
  bias = 0.1 * jax.random.normal(ks[4], (d,))
  return x, u, mask, scale, bias


class PostLNTest(parameterized.TestCase):

  def test_reference_equals_a_loop_over_rows(self):
    x, u, mask, scale, bias = (np.asarray(a, np.float64) for a in _inputs(
        jax.random.key(7), (3, 5)))
    want = np.zeros_like(x)
    for n in range(3):
      z = x[n] + mask[n] * u[n]
      want[n] = (z - z.mean()) / np.sqrt(z.var() + 1e-5) * scale + bias
    x, u, mask = (a[None] for a in (x, u, mask))
    want = want[None]
    np.testing.assert_allclose(
        kernels.post_ln_reference(x, u, mask, scale, bias), want, rtol=1e-5,
        atol=1e-6)

  @parameterized.parameters(((2, 64, 16),), ((1, 8, 32),))
  def test_equals_the_reference_and_its_gradients(self, shape):
    # (2, 64, 16): two row blocks; (1, 8, 32): one block of 8 rows.
    x, u, mask, scale, bias = _inputs(jax.random.key(0), shape)
    np.testing.assert_allclose(
        kernels.post_ln(x, u, mask, scale, bias),
        kernels.post_ln_reference(x, u, mask, scale, bias), rtol=1e-5,
        atol=1e-5)
    w = jax.random.normal(jax.random.key(1), shape)
    grads = [jax.jit(jax.grad(
        lambda x, u, m, s, b, f=f: jnp.sum(w * f(x, u, m, s, b)),
        (0, 1, 2, 3, 4)))(x, u, mask, scale, bias)
             for f in (kernels.post_ln, kernels.post_ln_reference)]
    for name, g, r in zip(("x", "u", "mask", "scale", "bias"), *grads):
      if name == "mask":        # the mask is a constant of the step
        np.testing.assert_array_equal(g, 0.0)
        continue
      np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5, err_msg=name)
      self.assertGreater(float(jnp.max(jnp.abs(r))), 0.1, name)

  def test_equals_flax_layer_norm_after_dropout(self):
    x, u, mask, scale, bias = _inputs(jax.random.key(2))
    ln = nn.LayerNorm(epsilon=1e-5)
    want = ln.apply({"params": {"scale": scale, "bias": bias}},
                    x + u * mask)
    np.testing.assert_allclose(kernels.post_ln(x, u, mask, scale, bias),
                               want, rtol=1e-5, atol=1e-5)

  def test_bfloat16_within_its_rounding(self):
    x, u, mask, scale, bias = _inputs(jax.random.key(3), dtype=jnp.bfloat16)
    got = kernels.post_ln(x, u, mask, scale, bias)
    self.assertEqual(got.dtype, jnp.bfloat16)
    want = kernels.post_ln_reference(x, u, mask, scale, bias)
    self.assertLess(float(jnp.max(jnp.abs(got.astype(jnp.float32) - want))),
                    0.05)

  def test_members_under_vmap_equal_one_at_a_time(self):
    x, u, mask, scale, bias = _inputs(jax.random.key(4), (3, 16, 8))
    f = lambda x, u, m, s: kernels.post_ln(x, u, m, s, bias)  # noqa: E731
    scales = scale[None] + jax.random.normal(jax.random.key(5), (3, 8))
    got, grad = jax.jit(jax.vmap(lambda *a: (f(*a), jax.grad(
        lambda s: jnp.sum(f(*a[:3], s) ** 2))(a[3]))))(x, u, mask, scales)
    for i in range(3):
      np.testing.assert_allclose(got[i], f(x[i], u[i], mask[i], scales[i]),
                                 rtol=1e-6, atol=1e-6)
      np.testing.assert_allclose(grad[i], jax.grad(lambda s: jnp.sum(
          f(x[i], u[i], mask[i], s) ** 2))(scales[i]), rtol=1e-5, atol=1e-6)

  def test_rows_must_fit_the_blocks(self):
    x, u, mask, scale, bias = _inputs(jax.random.key(6), (1, 96, 8))
    with self.assertRaisesRegex(ValueError, "multiple of 64"):
      kernels.post_ln(x, u, mask, scale, bias)


if __name__ == "__main__":
  absltest.main()
