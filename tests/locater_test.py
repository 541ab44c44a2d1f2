"""Tests for qkspec.theory.locater (paper Sec. 6)."""
import importlib

from absl.testing import absltest
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

  def test_qk_matrix_is_a_deprecated_alias(self):
    # W_QK from Flax kernels lives in the model (tests/model_test.py).
    model = importlib.import_module("qkspec.training.model")
    if not hasattr(model, "qk_from_kernels"):
      self.skipTest("qkspec.training.model.qk_from_kernels not added yet")
    with self.assertWarnsRegex(DeprecationWarning, "qk_from_kernels"):
      alias = locater.qk_matrix
    self.assertIs(alias, model.qk_from_kernels)
    kq = jax.random.normal(jax.random.key(4), (self.d, 3, 2))
    kk = jax.random.normal(jax.random.key(5), (self.d, 3, 2))
    np.testing.assert_array_equal(alias(kq, kk), model.qk_from_kernels(kq, kk))

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


if __name__ == "__main__":
  absltest.main()
