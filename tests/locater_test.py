"""Tests for qkspec.theory.locater (paper Sec. 6)."""
from absl.testing import absltest
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import locater

jax.config.update("jax_numpy_rank_promotion", "raise")


class LocaterTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    kq, kk = jax.random.split(jax.random.key(0))
    self.d, self.dh = 6, 4
    # Paper orientation: W_Q, W_K in R^{D x d}, W_QK = W_Q^T W_K.
    self.wq = jax.random.normal(kq, (self.dh, self.d))
    self.wk = jax.random.normal(kk, (self.dh, self.d))

  def _penalty(self, kappa1, kappa2, target):
    return lambda wq, wk: locater.locater_penalty(
        locater.qk_matrix(wq.T, wk.T), kappa1, kappa2, target)

  def test_value(self):
    w = np.asarray(self.wq).T @ np.asarray(self.wk)
    expect = 3.0 * np.trace(w.T @ w) + 0.5 * (np.trace(w) - 2.0)**2
    self.assertAlmostEqual(
        float(self._penalty(3.0, 0.5, 2.0)(self.wq, self.wk)), expect,
        places=3)

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

  def test_qk_matrix_matches_flax_dense_logits(self):
    x = jax.random.normal(jax.random.key(1), (5, self.d))
    dense = nn.Dense(self.dh, use_bias=False)
    pq = dense.init(jax.random.key(2), x)
    pk = dense.init(jax.random.key(3), x)
    logits = dense.apply(pq, x) @ dense.apply(pk, x).T
    w_qk = locater.qk_matrix(pq["params"]["kernel"], pk["params"]["kernel"])
    np.testing.assert_allclose(logits, x @ w_qk @ x.T, rtol=1e-4, atol=1e-4)

  def test_qk_matrix_per_head(self):
    h = 3
    kq = jax.random.normal(jax.random.key(4), (self.d, h, 2))
    kk = jax.random.normal(jax.random.key(5), (self.d, h, 2))
    out = locater.qk_matrix(kq, kk)
    self.assertEqual(out.shape, (h, self.d, self.d))
    for i in range(h):
      np.testing.assert_allclose(out[i], locater.qk_matrix(kq[:, i],
                                                           kk[:, i]),
                                 rtol=1e-5, atol=1e-5)
    self.assertEqual(locater.locater_penalty(out, 1.0, 1.0).shape, (h,))

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "kappa1"):
      locater.locater_penalty(jnp.eye(3), -1.0, 0.0)
    with self.assertRaisesRegex(ValueError, "kappa2"):
      locater.locater_penalty(jnp.eye(3), 0.0, -1.0)
    with self.assertRaisesRegex(ValueError, "square"):
      locater.locater_penalty(jnp.ones((3, 2)), 1.0, 1.0)
    with self.assertRaisesRegex(ValueError, "same shape"):
      locater.qk_matrix(jnp.ones((3, 2)), jnp.ones((3, 4)))


if __name__ == "__main__":
  absltest.main()
