"""Tests for qkspec.theory.grid_bases: its bases equal the direct products."""
# pylint: disable=invalid-name
import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import grid_bases
from qkspec.theory import grid_estimator
from qkspec.theory import propagation
from qkspec.theory import randomwalk
from qkspec.theory import spectrum
from qkspec.experiments import inputs
import testutil
import theory_fixtures


# The smoke grid's sizes, so that every test shares its compiled functions.
GRID = testutil.get_config("simulate_grid", "smoke")
T, DIM = GRID.seq_len, GRID.dim
LAM = math.sqrt(DIM)
MEANS, STDS = theory_fixtures.GRID_MEANS, theory_fixtures.GRID_STDS


class BasesTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    rng = np.random.default_rng(0)      # NumPy: no PRNG kernels to compile
    cls.x = jnp.asarray(np.cumsum(rng.standard_normal((5, T, DIM)), axis=1)
                        @ np.asarray(randomwalk.covariance_sqrt(
                            inputs.covariances(GRID)[1])), jnp.float32)
    q, r = np.linalg.qr(rng.standard_normal((DIM, DIM)))
    cls.basis = jnp.asarray(q * np.sign(np.diag(r)), jnp.float32)
    cls.z = jnp.asarray(rng.standard_normal(DIM), jnp.float32)
    q, r = np.linalg.qr(rng.standard_normal((DIM, DIM)))   # a second draw
    cls.bases_Kxdxd = jnp.stack([cls.basis, jnp.asarray(
        q * np.sign(np.diag(r)), jnp.float32)])
    cls.z_Kxd = jnp.stack([cls.z, jnp.asarray(rng.standard_normal(DIM),
                                              jnp.float32)])

  def _direct_w(self, k, mean, std):
    return spectrum.compose_qk(self.bases_Kxdxd[k],
                               mean + std * self.z_Kxd[k])

  @parameterized.parameters(zip(MEANS, STDS))
  def test_query_bases_equal_direct_logits(self, mean, std):
    x = self.x / math.sqrt(LAM)          # the bases take x / sqrt(lambda)
    zcat = grid_bases.draw_operators(self.bases_Kxdxd, self.z_Kxd, False)
    a, b = grid_bases.query_bases(
        x, grid_bases.times_z(x[:, -1], zcat, False))
    for k in range(2):
      direct = propagation.query_logits(self.x, self._direct_w(k, mean, std),
                                        LAM)
      tol = 1e-5 * float(jnp.abs(direct).max())
      np.testing.assert_allclose((mean * a + std * b[k]).T, direct, atol=tol)

  @parameterized.parameters(zip(MEANS, STDS))
  def test_attention_bases_equal_direct_logits(self, mean, std):
    x = self.x / math.sqrt(LAM)
    zcat = grid_bases.draw_operators(self.bases_Kxdxd, self.z_Kxd, False)
    g, h = grid_bases.attention_bases(
        x, grid_bases.times_z(x, zcat, False))
    for k in range(2):
      w = self._direct_w(k, mean, std)
      direct = jnp.einsum("nte,nse->nts", self.x @ w, self.x) / LAM
      tol = 1e-5 * float(jnp.abs(direct).max())
      np.testing.assert_allclose(mean * g + std * h[:, :, k], direct,
                                 atol=tol)

  def test_times_z_diagonal_shortcut_equals_product(self):
    # Isotropic Sigma: Z_k = diag(z_k), applied elementwise instead of by GEMM.
    zcat = grid_bases.draw_operators(self.bases_Kxdxd, self.z_Kxd, True)
    np.testing.assert_allclose(
        grid_bases.times_z(self.x, zcat, True),
        self.x[..., None, :] * self.z_Kxd[None, None], rtol=1e-6)
    np.testing.assert_allclose(
        grid_bases.times_z(self.x, zcat, True),
        grid_bases.times_z(self.x, zcat, False),
        atol=1e-5 * float(jnp.abs(self.x).max()))

  def test_random_walks_equal_random_walk(self):
    key = jax.random.key(2)
    np.testing.assert_allclose(grid_bases.random_walks(key, 3, T, DIM),
                               randomwalk.random_walk(key, 3, T, DIM),
                               rtol=1e-5, atol=1e-5)

  def test_draw_spectra_give_sample_qk(self):
    key, means, stds = jax.random.key(3), jnp.asarray(MEANS), jnp.asarray(
        STDS)

    @jax.jit
    def both():
      basis_Kxdxd, z_Kxd = grid_bases.draw_spectra(key, 4, DIM)
      eig_KxPxd = means[None, :, None] + stds[None, :, None] * z_Kxd[:, None]
      fast = spectrum.compose_qk(basis_Kxdxd[:, None], eig_KxPxd)
      keys = jax.vmap(lambda k: jax.random.fold_in(key, k))(jnp.arange(4))
      direct = jax.vmap(jax.vmap(lambda k, m, s: spectrum.sample_qk(
          k, DIM, m, s), (None, 0, 0)), (0, None, None))(keys, means, stds)
      return fast, direct

    fast, direct = both()
    np.testing.assert_allclose(fast, direct, atol=1e-5)

  def test_spectrum_traces_equal_spectrum_stats(self):
    cov = inputs.covariances(GRID)[1]
    coef = grid_bases.trace_coefficients(self.basis, self.z, cov)
    for mean, std in zip(MEANS, STDS):
      stats = spectrum.spectrum_stats(
          spectrum.compose_qk(self.basis, mean + std * self.z), cov)
      trace, trace_sq = grid_estimator.spectrum_traces(coef, mean, std)
      np.testing.assert_allclose(trace, stats["trace"], rtol=1e-4, atol=1e-4)
      np.testing.assert_allclose(trace_sq, stats["trace_sq"], rtol=1e-4)


if __name__ == "__main__":
  absltest.main()
