r"""Random-walk token sequences of Assumption 1 and the covariances of Fig. 5.

Shapes: N = sequences, T = tokens, d = token dimension. Tokens are rows.

.. math:: x_1 \sim \mathcal N(0, \Sigma),\qquad
          x_{t+1} \sim \mathcal N(x_t, \Sigma),

so :math:`\mathrm{Cov}(x_i, x_j) = \min(i, j)\,\Sigma` (1-based).
"""
import jax
import jax.numpy as jnp

from qkspec import _checks


def random_walk(key: jax.Array, num_sequences: int, seq_len: int, dim: int,
                cov: jax.Array | None = None) -> jax.Array:
  r"""Samples Gaussian random walks (Assumption 1).

  Args:
    key: PRNG key.
    num_sequences: N >= 1.
    seq_len: T >= 1.
    dim: d >= 1.
    cov: step covariance :math:`\Sigma` [d, d] (positive definite); None means
      the identity.

  Returns:
    x_NxTxd with :math:`x_t = \sum_{s \le t} \epsilon_s`,
    :math:`\epsilon_s \sim \mathcal N(0, \Sigma)` i.i.d.
  """
  n = _checks.positive_int("num_sequences", num_sequences)
  t = _checks.positive_int("seq_len", seq_len)
  d = _checks.positive_int("dim", dim)
  eps_NxTxd = jax.random.normal(key, (n, t, d))
  if cov is not None:
    _checks.square_matrix("cov", cov, d)
    chol_dxd = jnp.linalg.cholesky(cov)
    eps_NxTxd = eps_NxTxd @ chol_dxd.T   # rows ~ N(0, L L^T)
  return jnp.cumsum(eps_NxTxd, axis=1)


def anisotropic_covariance(key: jax.Array, dim: int,
                           half_width: float = 2.5) -> jax.Array:
  r"""The anisotropic covariance of Fig. 5: :math:`\Sigma = R^\top R / d`.

  :math:`R_{ij} \sim \mathrm{Unif}(-a, a)` with `a = half_width` (2.5 in the
  paper), so :math:`E\,\Sigma = (a^2/3) I` with a Wishart-like spread of
  eigenvalues.
  """
  d = _checks.positive_int("dim", dim)
  _checks.positive("half_width", half_width)
  r_dxd = jax.random.uniform(key, (d, d), minval=-half_width,
                             maxval=half_width)
  return r_dxd.T @ r_dxd / d
