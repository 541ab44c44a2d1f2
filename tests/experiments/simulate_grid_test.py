"""Tests for qkspec.experiments.simulate_grid: the grid run, its fields."""
import math

from absl import flags
from absl.testing import absltest
import chex
import jax
from ml_collections import config_flags
import numpy as np
from scipy import special

from qkspec.theory import grid_bases
from qkspec.experiments import inputs
from qkspec.experiments import simulate_grid
import testutil


def _numpy_exact_rho(w_dxd, cov_dxd, seq_len, lam):
  r"""Gaussian rho_i on the exact moments of u_i for one symmetric W_QK [T].

  u_i - 1/T = x_T^T M y_i, M = W_QK / lam, y_i = sum_j c_ij x_j with
  c_ij = (delta_ij - 1/T) / T; the walk has Cov(x_j, x_k) = min(j, k) Sigma,
  so (Isserlis, M symmetric) E = g_i tr(M Sigma) and
  V = (T b_i + g_i^2) tr((M Sigma)^2), b_i = c_i^T G c_i, g_i = (c G)_iT.
  """
  t = np.arange(1, seq_len + 1)
  walk_cov = np.minimum.outer(t, t).astype(float)           # G [T, T]
  c = (np.eye(seq_len) - 1.0 / seq_len) / seq_len
  b = np.einsum("ij,jk,ik->i", c, walk_cov, c)
  g = c @ walk_cov[:, -1]
  m_sigma = np.asarray(w_dxd, float) @ np.asarray(cov_dxd, float) / lam
  mean = 1.0 / seq_len + g * np.trace(m_sigma)
  var = (seq_len * b + g**2) * np.trace(m_sigma @ m_sigma)
  root = np.sqrt(2 * var)
  return 0.5 * (special.erf((1 - mean) / root) + special.erf(mean / root))


class SmokeRunTest(absltest.TestCase):

  def test_smoke_grid_run(self):
    config = testutil.get_config("simulate_grid", "smoke")
    workdir = testutil.workdir(self)
    result = simulate_grid.run(config, workdir)
    for name in ("config.json", "fig_grid_localization.png", "fig_grid_rho.png",
                 "simulate_grid.csv", "simulate_grid.npz"):
      self.assertGreater((workdir / name).stat().st_size, 0, name)
    out = result["out"]
    shape = (len(config.covariances), config.num_eigen_means,
             config.num_eigen_stds)
    chex.assert_shape(out["rho"], shape + (config.seq_len,))
    chex.assert_shape(out["entropy"], shape)
    self.assertLen(result["rows"], math.prod(shape))
    self.assertTrue(np.all((out["rho"] >= 0) & (out["rho"] <= 1)))
    self.assertTrue(np.all(out["rho_se"] >= 0))
    self.assertTrue(np.all(out["entropy"] <= math.log(config.seq_len) + 1e-5))
    # Axis order [C, M, S]: with Sigma = I, E_k tr(W)/lambda is affine in
    # (eigen_mean, eigen_std) with slope d/lambda in eigen_mean.
    means, _ = simulate_grid.grid_axes(config)
    slope = ((out["r"][0, 1:] - out["r"][0, :1])
             / (means[1:] - means[0])[:, None])
    np.testing.assert_allclose(slope, math.sqrt(config.dim), rtol=1e-4)
    # r_edges: where the measured r's slope in eigen_mean, for each
    # covariance, reaches Lemma 2's E r = -2 and +2
    edges = simulate_grid.r_edges(config)
    self.assertLen(edges, len(config.covariances))
    for c, pair in enumerate(edges):
      r_slope = np.polyfit(means, out["r"][c], 1)[0]            # [S]
      self.assertLen(pair, 2)
      np.testing.assert_allclose(np.multiply.outer(pair, r_slope),
                                 [[-2] * len(r_slope), [2] * len(r_slope)],
                                 rtol=1e-4)
    # rho_exact: at each point the mean over the K draws of the Gaussian
    # rho on each draw's exact moments, recomputed from its W_QK
    key = jax.random.fold_in(inputs.shared_key(jax.random.key(config.seed)),
                             0)                          # the spectra
    basis, z = jax.jit(grid_bases.draw_spectra, static_argnums=(1, 2))(
        key, config.num_draws, config.dim)
    basis, z = np.asarray(basis, float), np.asarray(z, float)
    covs, (_, stds) = np.asarray(inputs.covariances(config)), (
        simulate_grid.grid_axes(config))
    lam = math.sqrt(config.dim)
    for c, cov in enumerate(covs):
      for m, mean in enumerate(means):
        for s, std in enumerate(stds):
          want = np.mean([_numpy_exact_rho(
              (b * (mean + std * zk)) @ b.T, cov, config.seq_len, lam)
                          for b, zk in zip(basis, z)], axis=0)
          np.testing.assert_allclose(out["rho_exact"][c, m, s], want,
                                     rtol=1e-4, atol=1e-5,
                                     err_msg=f"cov {c}, ({mean}, {std})")


class CommandLineTest(absltest.TestCase):

  def test_grid_fields_parse_on_the_command_line(self):
    argv = ["prog", "--config",
            str(testutil.ROOT / "configs" / "simulate_grid.py:smoke"),
            "--config.eigen_std_range=(0.1, 1.0)", "--config.num_eigen_stds=3",
            "--config.temperature=2.0"]
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=flag_values,
                                    lock_config=True, sys_argv=argv)
    flag_values(argv)
    config = flag_values.config
    self.assertEqual(config.temperature, 2.0)
    self.assertEqual(tuple(config.eigen_std_range), (0.1, 1.0))
    simulate_grid.validate(config)
    _, stds = simulate_grid.grid_axes(config)
    np.testing.assert_allclose(stds, [0.1, math.sqrt(0.1), 1.0], rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
