r"""Random-walk token sequences (Assumption 1) and Fig. 5's covariances.

Shapes: N = sequences, T = tokens, d = token dimension; tokens are rows.

.. math:: x_1 \sim \mathcal N(0, \Sigma),\qquad
          x_{t+1} \sim \mathcal N(x_t, \Sigma),

so :math:`\mathrm{Cov}(x_i, x_j) = \min(i, j)\,\Sigma` (1-based).
"""
import jax
import jax.numpy as jnp

from qkspec.theory import _checks


def random_walk(key: jax.Array, num_sequences: int, seq_len: int, dim: int,
                cov: jax.Array | None = None) -> jax.Array:
  r"""N Gaussian random walks of T steps in d dimensions (Assumption 1).

  `cov` is the step covariance :math:`\Sigma` [d, d] (None: I); a concrete
  one that is not symmetric PSD raises ValueError. Returns x_NxTxd.
  """
  n = _checks.positive_int("num_sequences", num_sequences)
  t = _checks.positive_int("seq_len", seq_len)
  d = _checks.positive_int("dim", dim)
  eps_NxTxd = jax.random.normal(key, (n, t, d))
  if cov is not None:
    _checks.square_matrix("cov", cov, d)
    _checks.covariance("cov", cov)
    eps_NxTxd = eps_NxTxd @ covariance_sqrt(jnp.asarray(cov))
  return jnp.cumsum(eps_NxTxd, axis=1)


def covariance_sqrt(cov: jax.Array) -> jax.Array:
  r"""Symmetric :math:`\Sigma^{1/2}` [d, d] by eigendecomposition.

  Not Cholesky, which can return NaN in float32 for Fig. 5's nearly
  singular covariances; round-off negative eigenvalues are clipped to 0.
  """
  evals, evecs = jnp.linalg.eigh(cov)
  return (evecs * jnp.sqrt(jnp.clip(evals, 0.0))[None, :]) @ evecs.T


def anisotropic_covariance(key: jax.Array, dim: int,
                           half_width: float = 2.5) -> jax.Array:
  r"""Fig. 5's anisotropic :math:`\Sigma = R^\top R / d`, [d, d].

  :math:`R_{ij} \sim \mathrm{Unif}(-a, a)`, a = `half_width` (2.5 in the
  paper), so :math:`E\,\Sigma = (a^2/3) I`.
  """
  d = _checks.positive_int("dim", dim)
  _checks.positive("half_width", half_width)
  r_dxd = jax.random.uniform(key, (d, d), minval=-half_width,
                             maxval=half_width)
  return r_dxd.T @ r_dxd / d
