r"""Common random numbers for the (eigen_mean, eigen_std) grid of Fig. 5.

Shapes: C = covariances, K = W_QK draws, N = sequences, E = sequences for
the entropy (the first E of the N), T = tokens, d = token dimension.

Every grid point and covariance shares, per draw k, a Haar :math:`B_k` and
:math:`z_k \sim \mathcal N(0, I_d)`, so :math:`W_{QK} = \mu_w I + \sigma_w
Z_k`, :math:`Z_k = B_k\mathrm{diag}(z_k)B_k^\top` (`draw_spectra`), and
one set of walks :math:`X = S\Sigma^{1/2}` (Assumption 1). The logits are
then linear in the grid point,

.. math:: \omega_{tj} = \mu_w\,\frac{x_t^\top x_j}{\lambda}
        + \sigma_w\,\frac{x_t^\top Z_k x_j}{\lambda}
        = \mu_w\,g_{tj} + \sigma_w\,h^{(k)}_{tj},

combinations of bases computed once (`query_bases`, `attention_bases`;
walks kept divided by :math:`\sqrt\lambda`), and Lemma 1's traces are
quadratic in it (`trace_coefficients`). `grid_estimator` evaluates them.
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.theory import _checks
from qkspec.theory import randomwalk
from qkspec.theory import softmax
from qkspec.theory import spectrum

_SPECTRA_STREAM, _WALK_STREAM = 0, 1     # fold_in tags of `sample_bases`' key


def draw_spectra(key: jax.Array, num_draws: int,
                 dim: int) -> tuple[jax.Array, jax.Array]:
  r"""K common spectra: Haar basis_Kxdxd and N(0, 1) noise z_Kxd.

  `spectrum.compose_qk(basis[k], eigen_mean + eigen_std * z[k])` equals
  `spectrum.sample_qk(fold_in(key, k), dim, eigen_mean, eigen_std)`.
  """
  num_draws = _checks.positive_int("num_draws", num_draws)

  def one(k):
    key_b, key_w = jax.random.split(jax.random.fold_in(key, k))
    return (spectrum.haar_orthogonal(key_b, dim),
            jax.random.normal(key_w, (dim,)))

  return jax.vmap(one)(jnp.arange(num_draws))


def _matmul_rows(x_xd: jax.Array, m_dxe: jax.Array) -> jax.Array:
  """x @ m as one flat GEMM over every leading axis (faster on XLA:CPU)."""
  flat = x_xd.reshape(-1, x_xd.shape[-1]) @ m_dxe
  return flat.reshape(x_xd.shape[:-1] + m_dxe.shape[-1:])


def random_walks(key: jax.Array, num_sequences: int, seq_len: int,
                 dim: int) -> jax.Array:
  """`randomwalk.random_walk(key, num_sequences, seq_len, dim)`: x_NxTxd.

  Summed by `lax.associative_scan`: equal up to round-off, faster on
  XLA:CPU than `jnp.cumsum`.
  """
  eps_NxTxd = jax.random.normal(key, (num_sequences, seq_len, dim))
  return jax.lax.associative_scan(jnp.add, eps_NxTxd, axis=1)


def draw_operators(basis_Kxdxd: jax.Array, z_Kxd: jax.Array,
                   isotropic: jax.Array | bool) -> jax.Array:
  r"""zcat_dxKd: the draws' :math:`Z_k` side by side, for one Sigma.

  :math:`Z_k = B_k\,\mathrm{diag}(z_k)B_k^\top`, or :math:`\mathrm{diag}
  (z_k)` if `isotropic` (the rotated walks); `zcat[:, k*d:(k+1)*d]` =
  :math:`Z_k`.
  """
  num_draws, d = z_Kxd.shape
  zmat_Kxdxd = jnp.where(isotropic, jax.vmap(jnp.diag)(z_Kxd),
                         spectrum.compose_qk(basis_Kxdxd, z_Kxd))
  return jnp.moveaxis(zmat_Kxdxd, 0, 1).reshape(d, num_draws * d)


def times_z(v_Xxd: jax.Array, zcat_dxKd: jax.Array,
            diagonal: jax.Array | bool) -> jax.Array:
  """:math:`v Z_k` for every draw k: [..., d] -> [..., K, d] (`diagonal`:
  an isotropic Sigma, elementwise)."""
  d = zcat_dxKd.shape[0]
  shape = v_Xxd.shape[:-1] + (zcat_dxKd.shape[1] // d, d)

  def diag():
    z_Kxd = jnp.diagonal(zcat_dxKd.reshape(d, -1, d), axis1=0, axis2=2)
    return v_Xxd[..., None, :] * z_Kxd[(None,) * (v_Xxd.ndim - 1)]

  return jax.lax.cond(diagonal, diag,
                      lambda: _matmul_rows(v_Xxd, zcat_dxKd).reshape(shape))


def query_bases(x_NxTxd: jax.Array,
                zlast_NxKxd: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""Last-query bases: :math:`\omega_j = \mu_w\,a_j + \sigma_w\,b^{(k)}_j`.

  .. math:: a_j = x_T^\top x_j,\qquad b^{(k)}_j = x_T^\top Z_k x_j,

  of walks divided by :math:`\sqrt\lambda` and `zlast_NxKxd` =
  `times_z(x[:, -1], ...)`. Returns a_TxN, b_KxTxN.
  """
  return (jnp.einsum("nd,ntd->tn", x_NxTxd[:, -1, :], x_NxTxd),
          jnp.einsum("nkd,ntd->ktn", zlast_NxKxd, x_NxTxd))


def attention_bases(x_XxTxd: jax.Array,
                    zx_XxTxKxd: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""All-query bases g and :math:`h^{(k)}` of the logits.

  .. math:: X W_{QK} X^\top/\lambda = \mu_w\,g + \sigma_w\,h^{(k)},\qquad
            g = X X^\top,\qquad h^{(k)} = (X Z_k) X^\top;

  of walks divided by :math:`\sqrt\lambda` and `zx` = `times_z(x, ...)`.
  Returns g_XxTxT, h_XxTxKxT (queries first, keys last).
  """
  return (jnp.einsum("...td,...sd->...ts", x_XxTxd, x_XxTxd),
          jnp.einsum("...tkd,...sd->...tks", zx_XxTxKxd, x_XxTxd))


def trace_coefficients(basis_dxd: jax.Array, z_d: jax.Array,
                       cov_dxd: jax.Array) -> dict[str, jax.Array]:
  r"""One draw's coefficients of tr(W), tr(W^2) in (eigen_mean, eigen_std).

  With :math:`W = (\mu_w I + \sigma_w Z)\Sigma`: :math:`\mathrm{tr}\,W =
  \mu_w\,\mathrm{tr}\,\Sigma + \sigma_w\,\mathrm{tr}(Z\Sigma)`,
  :math:`\mathrm{tr}\,W^2 = \mu_w^2\mathrm{tr}\,\Sigma^2 +
  2\mu_w\sigma_w\,\mathrm{tr}(Z\Sigma^2) +
  \sigma_w^2\mathrm{tr}(Z\Sigma Z\Sigma)` (`grid_estimator.spectrum_traces`).
  Returns a dict of scalars `cov`, `cov2`, `zc`, `zc2`, `zczc`.
  """
  zc = spectrum.compose_qk(basis_dxd, z_d) @ cov_dxd       # Z Sigma
  return dict(cov=jnp.trace(cov_dxd),
              cov2=jnp.einsum("ij,ji->", cov_dxd, cov_dxd),
              zc=jnp.trace(zc),
              zc2=jnp.einsum("ij,ji->", zc, cov_dxd),
              zczc=jnp.einsum("ij,ji->", zc, zc))


def sample_bases(key: jax.Array, covs_Cxdxd: jax.Array, *, num_draws: int,
                 num_sequences: int, entropy_sequences: int, seq_len: int,
                 temperature: float | None = None) -> dict[str, jax.Array]:
  r"""Draws the common random numbers `grid_estimator.grid_stats` needs.

  Returns:
    A dict: `a` [C, T, N], `b` [K, C, T, N] (`query_bases`); for the
    entropy, `x` [C, E, T, d] (the first E walks, divided by
    sqrt(lambda)), `zcat` [C, d, K d] and `isotropic` [C]; and the
    `trace_coefficients` `cov`, `cov2` [C] and `zc`, `zc2`, `zczc` [K, C].
  """
  _checks.square_matrix("covs", covs_Cxdxd)
  d = covs_Cxdxd.shape[-1]
  lam = softmax.temperature(temperature, d)
  n = _checks.positive_int("num_sequences", num_sequences)
  e = _checks.positive_int("entropy_sequences", entropy_sequences)
  if e > n:
    raise ValueError(f"entropy_sequences ({e}) must be <= num_sequences "
                     f"({n}).")
  basis_Kxdxd, z_Kxd = draw_spectra(jax.random.fold_in(key, _SPECTRA_STREAM),
                                    num_draws, d)
  s_NxTxd = random_walks(jax.random.fold_in(key, _WALK_STREAM), n, seq_len,
                         d)                                  # Sigma = I

  per_cov = []
  for cov_dxd in covs_Cxdxd:
    iso = jnp.all(cov_dxd == cov_dxd[0, 0] * jnp.eye(d))
    zcat_dxKd = draw_operators(basis_Kxdxd, z_Kxd, iso)
    # X = S Sigma^(1/2) / sqrt(lambda): the cumulative sum commutes with the
    # right factor, so X is random_walk(key, ..., cov) up to round-off.
    x_NxTxd = jax.lax.cond(
        iso, lambda c=cov_dxd: s_NxTxd * jnp.sqrt(c[0, 0] / lam),
        lambda c=cov_dxd: _matmul_rows(
            s_NxTxd, randomwalk.covariance_sqrt(c) / lam**0.5))
    a_TxN, b_KxTxN = query_bases(
        x_NxTxd, times_z(x_NxTxd[:, -1, :], zcat_dxKd, iso))
    coef_K = jax.vmap(trace_coefficients, in_axes=(0, 0, None))(
        basis_Kxdxd, z_Kxd, cov_dxd)
    per_cov.append(dict(a=a_TxN, b=b_KxTxN, x=x_NxTxd[:e], zcat=zcat_dxKd,
                        isotropic=iso, **coef_K))
  out = {k: jnp.stack([c[k] for c in per_cov]) for k in per_cov[0]}  # [C..]
  return dict(out, b=jnp.swapaxes(out["b"], 0, 1), cov=out["cov"][:, 0],
              cov2=out["cov2"][:, 0], zc=out["zc"].T, zc2=out["zc2"].T,
              zczc=out["zczc"].T)
