r"""Token covariances and PRNG streams of `simulate_rho` and `simulate_grid`.

Shapes: C = covariances, d = token dimension. Both draw the same Sigma of
Assumption 1 (the identity, one anisotropic :math:`R^\top R/d`) and shared
bases from a config's `seed`, `dim`, `covariances`, `aniso_half_width`.
"""
import jax
import jax.numpy as jnp
import ml_collections

from qkspec.theory import randomwalk
from qkspec.experiments import outputs

COVARIANCES = ("isotropic", "anisotropic")
# fold_in tags of the seed key: per-draw keys (fresh design), the anisotropic
# Sigma, the shared design's bases (grid_bases.sample_bases).
DRAW_STREAM, COV_STREAM, SHARED_STREAM = 0, 1, 2


def require_covariances(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError unless `covariances` and `aniso_half_width` are
  valid."""
  outputs.require_subset(config, "covariances", COVARIANCES)
  outputs.require_positive(config, "aniso_half_width")


def covariances(config: ml_collections.ConfigDict) -> jax.Array:
  """[C, d, d]: the identity and one anisotropic Sigma from the config seed."""
  key = jax.random.fold_in(jax.random.key(config.seed), COV_STREAM)
  table = {"isotropic": jnp.eye(config.dim),
           "anisotropic": randomwalk.anisotropic_covariance(
               key, config.dim, config.aniso_half_width)}
  return jnp.stack([table[name] for name in config.covariances])


def shared_key(seed_key: jax.Array) -> jax.Array:
  """The key of `grid_bases.sample_bases` (shared design) for a seed key."""
  return jax.random.fold_in(seed_key, SHARED_STREAM)
