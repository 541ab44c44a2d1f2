"""Tests for qkspec.theory.locater (paper Sec. 6)."""

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import locater
from qkspec.theory import spectrum



class LocaterTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    kq, kk = jax.random.split(jax.random.key(0))
    self.d, self.dh = 6, 4
    # Paper orientation: W_Q, W_K in R^{D x d}, W_QK = W_Q^T W_K.
    self.wq = jax.random.normal(kq, (self.dh, self.d))
    self.wk = jax.random.normal(kk, (self.dh, self.d))

  def _penalty(self, kappa1, kappa2, target):
    return lambda wq, wk: locater.locater_penalty(wq.T @ wk, kappa1, kappa2,
                                                  target)

  def test_value(self):
    w = np.asarray(self.wq).T @ np.asarray(self.wk)
    expect = 3.0 * np.trace(w.T @ w) + 0.5 * (np.trace(w) - 2.0)**2
    self.assertAlmostEqual(
        float(self._penalty(3.0, 0.5, 2.0)(self.wq, self.wk)), expect,
        places=3)

  def test_leading_axes_kept_and_array_likes(self):
    w = jnp.ones((2, 3, 4, 4))           # [L, H, d, d]
    self.assertEqual(locater.locater_penalty(w, 1.0, 1.0).shape, (2, 3))
    self.assertAlmostEqual(float(locater.locater_penalty(
        [[1.0, 2.0], [0.0, 1.0]], 1.0, 1.0)), 6.0 + 1.0, places=6)

  def test_scale_gradient_closed_form(self):
    gq, gk = jax.grad(self._penalty(1.0, 0.0, 1.0), (0, 1))(self.wq, self.wk)
    np.testing.assert_allclose(gq, 2 * self.wk @ self.wk.T @ self.wq,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gk, 2 * self.wq @ self.wq.T @ self.wk,
                               rtol=1e-4, atol=1e-4)

  def test_trace_gradient_closed_form_and_paper_erratum(self):
    target = 1.0
    gq, gk = jax.grad(self._penalty(0.0, 1.0, target), (0, 1))(self.wq,
                                                                 self.wk)
    tr = jnp.trace(self.wq.T @ self.wk)
    np.testing.assert_allclose(gq, 2 * (tr - target) * self.wk, rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(gk, 2 * (tr - target) * self.wq, rtol=1e-4,
                               atol=1e-4)
    printed = (tr - target) * tr * self.wk      # Sec. 6 as printed
    self.assertGreater(float(jnp.abs(gq - printed).max()), 1e-2)

  def test_from_kernels_equals_the_dense_value_and_gradient(self):
    # Grouped-query kernels [d, N, D], [d, K, D]: value and gradient as
    # those of the d x d W_QK per head.
    kq, kk = jax.random.split(jax.random.key(1))
    wq = jax.random.normal(kq, (self.d, 4, 3))
    wk = jax.random.normal(kk, (self.d, 2, 3))

    def dense(wq, wk):
      return locater.locater_penalty(spectrum.qk_from_kernels(wq, wk), 0.3,
                                     0.7, 0.5)

    def small(wq, wk):
      return locater.kernel_locater_penalty(wq, wk, 0.3, 0.7, 0.5)

    def value_and_grad(f):
      return jax.jit(jax.value_and_grad(lambda *a: jnp.sum(f(*a)), (0, 1)))(
          wq, wk)

    (value, grads), (want_value, want_grads) = map(value_and_grad,
                                                   (small, dense))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(small(wq, wk), dense(wq, wk), rtol=1e-5)
    for g, want in zip(grads, want_grads):
      np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)

  def test_locater_hparams(self):
    self.assertEqual(locater.LocaterHParams._fields,
                     ("kappa1", "kappa2", "target"))
    self.assertEqual(locater.LocaterHParams(), (0.0, 0.0, 1.0))

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "kappa1"):
      locater.locater_penalty(jnp.eye(3), -1.0, 0.0)
    with self.assertRaisesRegex(ValueError, "kappa2"):
      locater.locater_penalty(jnp.eye(3), 0.0, -1.0)
    with self.assertRaisesRegex(ValueError, "square"):
      locater.locater_penalty(jnp.ones((3, 2)), 1.0, 1.0)
    with self.assertRaises(AttributeError):
      locater.no_such_name  # pylint: disable=pointless-statement


class PenaltyMinimumTest(absltest.TestCase):
  """`penalty_minimum` against the penalty it minimises."""

  def test_gradient_vanishes_there_and_nowhere_near(self):
    d, kappa1, kappa2, target = 5, 3.0, 0.7, 2.0
    star = locater.penalty_minimum(kappa1, kappa2, d, target)
    w_star = star.trace / d * jnp.eye(d)

    def penalty(w):
      return locater.locater_penalty(w, kappa1, kappa2, target)
    np.testing.assert_allclose(jax.grad(penalty)(w_star), 0.0, atol=1e-5)
    self.assertAlmostEqual(float(jnp.sum(w_star**2)), float(star.scale),
                           places=5)
    # Strictly convex: any move away raises it (a global minimum).
    moves = jax.random.normal(jax.random.key(1), (64, d, d)) * 1e-2
    raised = jax.vmap(lambda m: penalty(w_star + m))(moves) - penalty(w_star)
    self.assertGreater(float(raised.min()), 0.0)
    # The minimum is not at the target trace: kappa1 pulls it below.
    self.assertLess(float(star.trace), target)

  def test_gradient_descent_on_the_factors_reaches_it(self):
    # The paper's parametrisation W_QK = W_Q^T W_K (D = d), plain gradient
    # descent from a random start, as training would with J = 0.
    d, kappa1, kappa2 = 6, 1.0, 0.5
    kq, kk = jax.random.split(jax.random.key(2))
    factors = (0.3 * jax.random.normal(kq, (d, d)),
               0.3 * jax.random.normal(kk, (d, d)))

    def loss(f):
      return locater.locater_penalty(f[0].T @ f[1], kappa1, kappa2)

    def step(_, f):
      return jax.tree.map(lambda x, g: x - 0.05 * g, f, jax.grad(loss)(f))
    wq, wk = jax.lax.fori_loop(0, 3000, step, factors)
    star = locater.penalty_minimum(kappa1, kappa2, d)
    self.assertAlmostEqual(float(star.trace), 0.75, places=6)   # 0.5*6/4
    np.testing.assert_allclose(wq.T @ wk, star.trace / d * np.eye(d),
                               atol=1e-4)

  def test_scale_grows_with_kappa2_and_limits(self):
    d = 128
    kappa2 = jnp.asarray([0.0, 1e-3, 1e-2, 1e-1, 1.0, 1e6])
    star = locater.penalty_minimum(100.0, kappa2, d)
    self.assertTrue(bool(jnp.all(jnp.diff(star.scale) > 0)))
    self.assertEqual(float(star.trace[0]), 0.0)            # kappa2 = 0: W = 0
    self.assertAlmostEqual(float(star.trace[-1]), 1.0, places=4)  # -> tau
    self.assertAlmostEqual(float(star.scale[-1]), 1.0 / d, places=6)
    # The fairseq reading (both kappas / 4096) has the same minimum.
    fairseq = locater.penalty_minimum(100.0 / 4096, kappa2 / 4096, d)
    np.testing.assert_allclose(fairseq.trace, star.trace, rtol=1e-5)
    # kappa1 = 0: the smallest-scale W of trace tau; no penalty: none.
    self.assertAlmostEqual(float(locater.penalty_minimum(0.0, 2.0, 4).scale),
                           0.25, places=6)
    self.assertTrue(bool(jnp.isnan(locater.penalty_minimum(0.0, 0.0, 4)
                                   .trace)))

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "kappa1"):
      locater.penalty_minimum(-1.0, 1.0, 4)
    with self.assertRaisesRegex(ValueError, "dim"):
      locater.penalty_minimum(1.0, 1.0, 0)


if __name__ == "__main__":
  absltest.main()
