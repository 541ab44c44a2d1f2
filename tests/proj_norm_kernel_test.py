"""Tests for qkspec.training.proj_norm_kernel (Pallas' interpreter on a
CPU): the attention's output projection with its residual sum, dropout and
LayerNorm as one kernel, and its gradients against autodiff of the jnp
reference in float32 and bfloat16."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.training import proj_norm_kernel
import testutil

jax.config.update("jax_numpy_rank_promotion", "raise")
NAMES = ("x", "u", "w", "c", "scale", "bias")


def _inputs(key, shape=(2, 64, 16), keep=0.7, biased=True):
  ks = jax.random.split(key, 7)
  d = shape[-1]
  x, u = (jax.random.normal(k, shape) for k in ks[:2])
  mask = (jax.random.uniform(ks[2], shape) < keep) / keep
  w = jax.random.normal(ks[3], (d, d)) / np.sqrt(d)
  c = 0.3 * jax.random.normal(ks[4], (d,)) if biased else None
  scale = 1.0 + 0.1 * jax.random.normal(ks[5], (d,))
  bias = 0.1 * jax.random.normal(ks[6], (d,))
  return mask, (x, u, w, c, scale, bias)


def _grads(f, mask, args, wt):
  """Gradients of sum(wt * f(x, u, mask, w, c, scale, bias)) by every
  argument but the mask (None for an absent bias)."""
  return testutil.grads_skipping_none(
      lambda x, u, *rest: jnp.sum(wt * f(x, u, mask, *rest).astype(
          jnp.float32)), args)


class KernelTest(parameterized.TestCase):

  @parameterized.parameters(((2, 64, 16), True), ((1, 8, 32), True),
                            ((2, 64, 16), False))
  def test_float32_equals_the_reference_and_its_gradients(self, shape,
                                                          biased):
    mask, args = _inputs(jax.random.key(0), shape, biased=biased)
    x, u, w, c, scale, bias = args
    np.testing.assert_allclose(
        proj_norm_kernel.proj_norm(x, u, mask, w, c, scale, bias),
        proj_norm_kernel.reference(x, u, mask, w, c, scale, bias),
        rtol=1e-5, atol=1e-5)
    wt = jax.random.normal(jax.random.key(1), shape)
    got, want = (_grads(f, mask, args, wt) for f in (
        proj_norm_kernel.proj_norm, proj_norm_kernel.reference))
def _grads(f, mask, args, wt):
  """Gradients of sum(wt * f(x, u, mask, w, c, scale, bias)) by every
  argument but the mask (None for an absent bias)."""
  return testutil.grads_skipping_none(
      lambda x, u, *rest: jnp.sum(wt * f(x, u, mask, *rest).astype(
          jnp.float32)), args)



  def test_bfloat16_rounds_where_the_xla_path_rounds(self):
    # The kernel's bf16 output is the bf16 reference's, rounded (all but a
    # few elements), where the projection in float32 differs in many.
    mask, (x, u, w, c, scale, bias) = _inputs(jax.random.key(2))
    xb, ub = x.astype(jnp.bfloat16), u.astype(jnp.bfloat16)
    y = proj_norm_kernel.proj_norm(xb, ub, mask, w, c, scale, bias)
    self.assertEqual(y.dtype, jnp.bfloat16)
    differ = lambda r: float(jnp.mean(  # noqa: E731
        y != r.astype(jnp.bfloat16)))
    self.assertLess(differ(proj_norm_kernel.reference(
        xb, ub, mask, w, c, scale, bias)), 0.01)
    self.assertGreater(differ(proj_norm_kernel.reference(
        xb.astype(jnp.float32), ub.astype(jnp.float32), mask, w, c, scale,
        bias)), 0.1)
    wt = jax.random.normal(jax.random.key(3), x.shape)
    got, want, exact = (_grads(f, mask, a, wt) for f, a in (
        (proj_norm_kernel.proj_norm, (xb, ub, w, c, scale, bias)),
        (proj_norm_kernel.reference, (xb, ub, w, c, scale, bias)),
        (proj_norm_kernel.reference, (x, u, w, c, scale, bias))))
    for name, g, r, e in zip(NAMES, got, want, exact):
      g, r, e = (np.asarray(a, np.float32) for a in (g, r, e))
      scale_ = np.abs(e).max()
      np.testing.assert_allclose(g, r, atol=0.02 * scale_, err_msg=name)
      np.testing.assert_allclose(g, e, atol=0.05 * scale_, err_msg=name)
    self.assertEqual(got[1].dtype, jnp.bfloat16)      # dU, for attention

  def test_two_references_gradients_add(self):
    mask, args = _inputs(jax.random.key(4))
    x, u, w, c, scale, bias = args
    w1, w2 = jax.random.normal(jax.random.key(5), (2, *x.shape))
    f = lambda x, u: proj_norm_kernel.proj_norm(  # noqa: E731
        x, u, mask, w, c, scale, bias, outputs=2)
    y1, y2 = f(x, u)
    np.testing.assert_array_equal(y1, y2)
    got = jax.grad(lambda x, u: (lambda y: jnp.sum(w1 * y[0] + w2 * y[1]))(
        f(x, u)), (0, 1))(x, u)
    want = jax.grad(lambda x, u: jnp.sum((w1 + w2) * proj_norm_kernel
                                         .reference(x, u, mask, w, c, scale,
                                                    bias)), (0, 1))(x, u)
    for g, r in zip(got, want):
      np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)

  def test_vmapped_members_each_their_own(self):
    mask, (x, u, _, _, scale, bias) = _inputs(jax.random.key(6), (3, 16, 8))
    ws = jax.random.normal(jax.random.key(7), (3, 8, 8)) / np.sqrt(8)
    cs = jax.random.normal(jax.random.key(8), (3, 8))
    f = lambda x, u, m, w, c: proj_norm_kernel.proj_norm(  # noqa: E731
        x, u, m, w, c, scale, bias)
    got = jax.vmap(f)(x, u, mask, ws, cs)
    gw = jax.vmap(lambda *a: jax.grad(lambda w: jnp.sum(
        f(a[0], a[1], a[2], w, a[3]) ** 2))(a[4]))(x, u, mask, cs, ws)
    for i in range(3):
      np.testing.assert_allclose(got[i], proj_norm_kernel.reference(
          x[i], u[i], mask[i], ws[i], cs[i], scale, bias), rtol=1e-5,
                                 atol=1e-5)
      np.testing.assert_allclose(gw[i], jax.grad(lambda w: jnp.sum(
          proj_norm_kernel.reference(x[i], u[i], mask[i], w, cs[i], scale,
                                     bias) ** 2))(ws[i]), rtol=1e-4,
                                 atol=1e-4)

  def test_refuses_other_shapes(self):
    mask, (x, u, w, c, scale, bias) = _inputs(jax.random.key(9))
    with self.assertRaisesRegex(ValueError, "heads' width equal to d"):
      proj_norm_kernel.proj_norm(x, u[..., :8], mask, w, c, scale, bias)
    with self.assertRaisesRegex(ValueError, "outputs must be 1 or 2"):
      proj_norm_kernel.proj_norm(x, u, mask, w, c, scale, bias, outputs=3)


if __name__ == "__main__":
  absltest.main()
