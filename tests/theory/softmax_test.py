"""Tests for qkspec.theory.softmax (paper Sec. 2)."""
from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import softmax as sm



class SoftmaxTest(chex.TestCase):

  @chex.variants(with_jit=True, without_jit=True)
  def test_softmax_sums_to_one_and_is_shift_invariant(self):
    omega = jax.random.normal(jax.random.key(0), (3, 7)) * 4
    f = self.variant(sm.softmax)
    p = f(omega)
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(f(omega + 123.0), p, rtol=1e-5, atol=1e-7)
    naive = np.exp(omega) / np.exp(omega).sum(-1, keepdims=True)
    np.testing.assert_allclose(p, naive, rtol=1e-5)

  def test_linear_score_is_first_order_taylor_of_softmax(self):
    t = 9
    omega = jax.random.normal(jax.random.key(1), (t,))
    jac = jax.jacfwd(jax.nn.softmax)(jnp.zeros(t))     # gamma^i as rows
    taylor = jac @ omega + jax.nn.softmax(jnp.zeros(t))
    np.testing.assert_allclose(sm.linearized_score(omega), taylor, atol=1e-6)
    # The remainder is second order: halving omega quarters the error.
    err = [np.abs(sm.softmax(e * omega) - sm.linearized_score(e * omega)).max()
           for e in (1e-2, 5e-3)]
    self.assertAlmostEqual(err[0] / err[1], 4.0, delta=0.2)

  def test_a_mask_gives_the_score_over_the_visible_keys(self):
    omega = np.asarray(jax.random.normal(jax.random.key(3), (7,))) * 4
    mask = np.array([1, 0, 1, 1, 0, 1, 1], bool)
    hidden = np.where(mask, omega, -np.inf)
    got, event = jax.jit(lambda o, m: (sm.linearized_score(o, mask=m),
                                       sm.propagation_mask(o, mask=m)))(
                                           hidden, mask)
    u = (omega[mask] - omega[mask].mean()) / mask.sum() + 1 / mask.sum()
    np.testing.assert_allclose(got[mask], u, rtol=1e-6)
    np.testing.assert_array_equal(event[mask], (u >= 0) & (u <= 1))
    self.assertFalse(np.any(event[~mask]))

  def test_piecewise_linear_softmax_matches_definition(self):
    omega = np.asarray(jax.random.normal(jax.random.key(2), (50, 6)) * 20)
    out = np.asarray(sm.piecewise_linear_softmax(omega))
    mask = np.asarray(sm.propagation_mask(omega))
    t = omega.shape[-1]
    for row, o_row, m_row in zip(omega, out, mask):
      for i in range(t):
        u = np.dot(np.eye(t)[i] / t - np.ones(t) / t**2, row) + 1 / t
        expected = 0.0 if u < 0 else (1.0 if u > 1 else u)
        self.assertAlmostEqual(o_row[i], expected, places=5)
        self.assertEqual(m_row[i], 0 <= u <= 1)
    self.assertTrue(mask.any() and not mask.all())   # both regimes exercised

  def test_piecewise_linear_is_linear_inside_a_region(self):
    omega = jnp.array([0.3, -0.2, 0.1, 0.0])
    direction = jnp.array([1.0, 2.0, -1.0, 0.5])

    def f(s):
      return sm.piecewise_linear_softmax(omega + s * direction)
    second_diff = f(0.2) - 2 * f(0.1) + f(0.0)
    np.testing.assert_allclose(second_diff, 0.0, atol=1e-6)

  @parameterized.parameters(0, 1)
  def test_axis(self, axis):
    omega = jax.random.normal(jax.random.key(3), (5, 5)) * 30
    moved = jnp.moveaxis(omega, axis, -1)
    np.testing.assert_array_equal(
        jnp.moveaxis(sm.propagation_mask(omega, axis=axis), axis, -1),
        sm.propagation_mask(moved))

  def test_bad_axis_raises(self):
    with self.assertRaisesRegex(ValueError, "axis 3"):
      sm.piecewise_linear_softmax(jnp.ones((2, 3)), axis=3)
    with self.assertRaisesRegex(ValueError, "at least 1"):
      sm.softmax(jnp.ones((2, 0)))


class TemperatureTest(absltest.TestCase):

  def test_none_is_the_square_root_of_the_head_width_in_float32(self):
    for head_dim in (1, 3, 16, 64, 128):
      lam = sm.temperature(None, head_dim)
      self.assertIsInstance(lam, np.float32)
      # The float32 square root, as jnp computes it.
      self.assertEqual(lam, np.asarray(jnp.sqrt(jnp.float32(head_dim))))
    self.assertEqual(sm.temperature(None, 16), 4.0)

  def test_a_given_value_is_returned_as_is(self):
    self.assertIs(sm.temperature(2.5, 16), 2.5)
    self.assertEqual(sm.temperature(2.5, None), 2.5)
    lam = jnp.asarray(3.0)
    self.assertIs(sm.temperature(lam, None), lam)

  def test_bad_values_raise(self):
    for bad in (0.0, -1.0, float("nan")):
      with self.assertRaisesRegex(ValueError, "temperature must be positive"):
        sm.temperature(bad, 16)
    with self.assertRaisesRegex(ValueError, "temperature is required"):
      sm.temperature(None, None)

  def test_traced_values_are_not_inspected(self):
    self.assertEqual(float(jax.jit(lambda t: sm.temperature(t, None))(-1.0)),
                     -1.0)

  def test_float64_callers_see_the_float32_value(self):
    lam = sm.temperature(None, 128)
    with jax.enable_x64(True):
      x = jnp.ones((3,), jnp.float64) * 10.0
      self.assertEqual((x / lam).dtype, jnp.float64)
      np.testing.assert_array_equal(x / lam, 10.0 / np.float64(lam))
      self.assertEqual((x / lam**2).dtype, jnp.float64)
      self.assertEqual(np.float64(lam**2), np.float64(np.float32(lam * lam)))
    x32 = jnp.ones((3,), jnp.float32) * 10.0
    self.assertEqual((x32 / lam).dtype, jnp.float32)


if __name__ == "__main__":
  absltest.main()
