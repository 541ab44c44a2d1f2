"""Tests for qkspec.experiments.inputs: the Sigma of Assumption 1 and the
PRNG streams simulate_rho and simulate_grid share."""
from absl.testing import absltest
import jax
import numpy as np

from qkspec.experiments import inputs
from qkspec.theory import randomwalk
import testutil


class CovariancesTest(absltest.TestCase):

  def test_identity_and_the_seeds_anisotropic_sigma_in_config_order(self):
    config = testutil.get_config("simulate_rho", "smoke")
    config.covariances = ("anisotropic", "isotropic")
    got = np.asarray(inputs.covariances(config))
    key = jax.random.fold_in(jax.random.key(config.seed), inputs.COV_STREAM)
    np.testing.assert_array_equal(got[0], randomwalk.anisotropic_covariance(
        key, config.dim, config.aniso_half_width))
    np.testing.assert_array_equal(got[1], np.eye(config.dim))
    grid = testutil.get_config("simulate_grid", "smoke")
    grid.update(seed=config.seed, dim=config.dim,
                aniso_half_width=config.aniso_half_width,
                covariances=("anisotropic",))
    np.testing.assert_array_equal(inputs.covariances(grid)[0], got[0])

  def test_bad_fields_are_named(self):
    config = testutil.get_config("simulate_rho", "smoke")
    config.covariances = ("isotropic", "skewed")
    with self.assertRaisesRegex(ValueError, "config.covariances"):
      inputs.require_covariances(config)
    config.covariances = ("isotropic",)
    config.aniso_half_width = 0.0
    with self.assertRaisesRegex(ValueError, "config.aniso_half_width"):
      inputs.require_covariances(config)

  def test_the_streams_differ(self):
    key = jax.random.key(0)
    streams = [jax.random.key_data(jax.random.fold_in(key, s)) for s in (
        inputs.DRAW_STREAM, inputs.COV_STREAM, inputs.SHARED_STREAM)]
    np.testing.assert_array_equal(streams[2],
                                  jax.random.key_data(inputs.shared_key(key)))
    self.assertLen({tuple(np.asarray(s).ravel()) for s in streams}, 3)


if __name__ == "__main__":
  absltest.main()
