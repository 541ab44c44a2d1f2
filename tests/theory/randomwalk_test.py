"""Tests for qkspec.theory.randomwalk (Assumption 1, Fig. 5 covariances)."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import randomwalk



class RandomWalkTest(absltest.TestCase):

  def test_covariance_is_min_i_j_sigma(self):
    n, t, d = 60_000, 4, 3
    sigma = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, -0.3], [0.0, -0.3, 0.5]])
    x = np.asarray(randomwalk.random_walk(jax.random.key(0), n, t, d,
                                          jnp.asarray(sigma)), np.float64)
    flat = x.reshape(n, t * d)
    emp = flat.T @ flat / n                       # E x = 0 by construction
    expected = np.kron(np.minimum.outer(np.arange(1, t + 1),
                                        np.arange(1, t + 1)), sigma)
    # Monte Carlo standard error of each entry: sqrt((C_aa C_bb + C_ab^2)/n).
    diag = np.diag(expected)
    se = np.sqrt((np.outer(diag, diag) + expected**2) / n)
    self.assertLess(np.max(np.abs(emp - expected) / se), 5.0)
    self.assertLess(np.max(np.abs(flat.mean(0)) / np.sqrt(diag / n)), 5.0)

  def test_covariance_sqrt_of_singular_matrix(self):
    r = jax.random.normal(jax.random.key(3), (3, 5))
    sigma = r.T @ r                               # rank 3 < 5
    root = randomwalk.covariance_sqrt(sigma)
    self.assertTrue(bool(jnp.all(jnp.isfinite(root))))
    np.testing.assert_allclose(root @ root.T, sigma, atol=1e-4)

  def test_identity_default(self):
    key = jax.random.key(1)
    np.testing.assert_allclose(
        randomwalk.random_walk(key, 3, 5, 4),
        randomwalk.random_walk(key, 3, 5, 4, jnp.eye(4)), atol=1e-6)

  def test_anisotropic_covariance_law(self):
    d, a = 16, 2.5
    covs = jax.vmap(lambda k: randomwalk.anisotropic_covariance(k, d, a))(
        jax.random.split(jax.random.key(2), 400))
    np.testing.assert_allclose(covs, np.swapaxes(covs, -1, -2), atol=1e-6)
    evals = jnp.linalg.eigvalsh(covs)
    self.assertGreater(float(evals.min()), -1e-6 * float(evals.max()))
    mean = np.asarray(covs.mean(0))
    # E[R^T R / d] = E[R_ij^2] I = a^2 / 3 I.
    np.testing.assert_allclose(np.diag(mean), a**2 / 3, rtol=0.05)
    # Off-diagonal entries: standard deviation (a^2/3) / sqrt(d) per draw.
    se = a**2 / 3 / np.sqrt(d * covs.shape[0])
    self.assertLess(np.abs(mean - np.diag(np.diag(mean))).max(), 5 * se)

  def test_bad_arguments(self):
    key = jax.random.key(0)
    with self.assertRaisesRegex(ValueError, "num_sequences"):
      randomwalk.random_walk(key, 0, 5, 3)
    with self.assertRaisesRegex(ValueError, "seq_len"):
      randomwalk.random_walk(key, 2, 0, 3)
    with self.assertRaisesRegex(ValueError, "cov must be 3 x 3"):
      randomwalk.random_walk(key, 2, 5, 3, jnp.eye(4))
    with self.assertRaisesRegex(ValueError, "half_width"):
      randomwalk.anisotropic_covariance(key, 4, -1.0)

  def test_covariance_must_be_symmetric_psd(self):
    key = jax.random.key(0)
    with self.assertRaisesRegex(ValueError, "cov must be symmetric"):
      randomwalk.random_walk(key, 2, 5, 2, jnp.array([[1.0, 0.5], [0.0, 1.0]]))
    with self.assertRaisesRegex(ValueError, "cov must be positive semi-def"):
      randomwalk.random_walk(key, 2, 5, 2, jnp.array([[1.0, 2.0], [2.0, 1.0]]))
    # A singular covariance (the edge of PSD) and a list are fine.
    x = randomwalk.random_walk(key, 2, 5, 2, [[1.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(x[..., 0], x[..., 1], rtol=1e-5, atol=1e-6)
    # Under jit the value is not inspected (no host sync): no error.
    walk = jax.jit(lambda c: randomwalk.random_walk(key, 2, 5, 2, c))
    self.assertEqual(walk(-jnp.eye(2)).shape, (2, 5, 2))


if __name__ == "__main__":
  absltest.main()
