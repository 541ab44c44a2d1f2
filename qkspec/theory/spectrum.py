r"""QK-eigenspectrum statistics (Eqs. 5, 7, 8) and controlled spectra (Fig. 5).

Shapes: d = token dimension, H = heads, D = head width; the statistics
accept leading batch axes.

:math:`W_{QK} = W_Q^\top W_K` of a model comes from its query and key
kernels (`qk_from_kernels`).

For :math:`W = \mathrm{sym}(W_{QK})\,\Sigma` (Lemma 1 uses the symmetric
part): :math:`\xi = \mathrm{tr}W/\sqrt{\mathrm{tr}W^2}`, :math:`\eta =
\sqrt{\mathrm{tr}W^2}/\lambda` (Eq. 6), :math:`r = \xi\eta =
\mathrm{tr}W/\lambda` (Lemma 2) and the eigen-variance :math:`d\,
\mathrm{tr}(W^2) - \mathrm{tr}(W)^2` (Eq. 8). "Scale" means only
:math:`\mathrm{tr}(W_{QK}^\top W_{QK})` (Sec. 6, Fig. 6B); Fig. 5's
eigenvalue law is (`eigen_mean`, `eigen_std`).

Erratum in Eq. (7): its first and last steps fail at :math:`W_{QK} = \Sigma
= I` (:math:`\sqrt d \le 1`). What holds, by Cauchy-Schwarz:
:math:`|\mathrm{tr} W|/(\sqrt d\|\Sigma\|_2) \le \|W_{QK}\|_F \le
\|W_{QK}\|_{1,\mathrm{entrywise}}` (tests/theory/spectrum_test.py).
"""
import jax
import jax.numpy as jnp

from qkspec.theory import _checks
from qkspec.theory import softmax


def symmetrize(w: jax.Array) -> jax.Array:
  """:math:`(W + W^T)/2` over the last two axes."""
  return 0.5 * (w + jnp.swapaxes(w, -1, -2))


def haar_orthogonal(key: jax.Array, dim: int) -> jax.Array:
  """A Haar-distributed orthogonal [d, d] (QR of a Gaussian, sign-fixed).

  References:
    Mezzadri, How to generate random matrices from the classical compact
    groups, Notices of the AMS 54 (2007).
  """
  d = _checks.positive_int("dim", dim)
  q, r = jnp.linalg.qr(jax.random.normal(key, (d, d)))
  return q * jnp.sign(jnp.diagonal(r))[None, :]   # makes the law exactly Haar


def compose_qk(basis_dxd: jax.Array, eigenvalues_d: jax.Array) -> jax.Array:
  r""":math:`W_{QK} = B\,\mathrm{diag}(w)\,B^\top` [..., d, d] (Fig. 5).

  B [..., d, d] is orthogonal (columns: eigenvectors), w [..., d].
  """
  return (basis_dxd * eigenvalues_d[..., None, :]) @ jnp.swapaxes(
      basis_dxd, -1, -2)


def qk_from_kernels(wq_kernel: jax.Array, wk_kernel: jax.Array) -> jax.Array:
  r""":math:`W_{QK} = W_Q^\top W_K` from Flax `Dense`/`DenseGeneral` kernels.

  A Flax kernel maps rows (`q = x @ kernel`), so :math:`W_Q` is
  `wq_kernel.T` and :math:`W_{QK}` = `wq_kernel @ wk_kernel.T`: [d, d] of
  [d, D] kernels, [H, d, d] of [d, H, D] ones.
  """
  wq_kernel, wk_kernel = jnp.asarray(wq_kernel), jnp.asarray(wk_kernel)
  if jnp.shape(wq_kernel) != jnp.shape(wk_kernel):
    raise ValueError("wq_kernel and wk_kernel must have the same shape, got "
                     f"{jnp.shape(wq_kernel)} and {jnp.shape(wk_kernel)}.")
  if wq_kernel.ndim == 2:
    return wq_kernel @ wk_kernel.T
  if wq_kernel.ndim == 3:
    return jnp.einsum("ihk,jhk->hij", wq_kernel, wk_kernel)
  raise ValueError("kernels must be [d, D] or [d, H, D], got shape "
                   f"{jnp.shape(wq_kernel)}.")


def sample_qk(key: jax.Array, dim: int, eigen_mean: float | jax.Array,
              eigen_std: float | jax.Array) -> jax.Array:
  r"""A symmetric :math:`W_{QK}` [d, d] with a controlled spectrum (Fig. 5).

  .. math:: W_{QK} = B\,\mathrm{diag}(w)\,B^\top,\quad
            w_i \sim \mathcal N(\text{eigen\_mean}, \text{eigen\_std}^2),

  B Haar-orthogonal. Both may be traced; a concrete negative `eigen_std`
  raises ValueError.
  """
  _checks.nonnegative("eigen_std", eigen_std)
  key_b, key_w = jax.random.split(key)
  basis_dxd = haar_orthogonal(key_b, dim)
  w_d = eigen_mean + eigen_std * jax.random.normal(key_w, (dim,))
  return compose_qk(basis_dxd, w_d)


def scale_floor(qk_trace, dim: int) -> jax.Array:
  r"""The least scale a W_QK of its trace has: :math:`(\mathrm{tr}W_{QK})^2/d`.

  .. math:: \mathrm{tr}(W_{QK}^\top W_{QK})
            \ge \sum_i (W_{QK})_{ii}^2 \ge \frac{(\mathrm{tr}\,W_{QK})^2}{d}

  with equality exactly at :math:`W_{QK} = cI` (`locater.penalty_minimum`).
  """
  d = _checks.positive_int("dim", dim)
  return jnp.asarray(qk_trace, float)**2 / d


def spectrum_stats(w_qk: jax.Array, cov: jax.Array | None = None,
                   temperature: float | None = None) -> dict[str, jax.Array]:
  r"""Eigenspectrum statistics of :math:`W = \mathrm{sym}(W_{QK})\Sigma`.

  `w_qk` [..., d, d]; `cov` :math:`\Sigma` [d, d], None = I; `temperature`
  :math:`\lambda`, None = :math:`\sqrt d`.

  Returns:
    A dict of [...] arrays: `trace` tr(W), `trace_sq` tr(W^2), `scale`
    tr(W_QK^T W_QK), `xi` (defined as 0 where tr(W^2) = 0, i.e. W = 0),
    `eta`, `r` = tr(W)/lambda, `variance` d tr(W^2) - tr(W)^2 (Eq. 8),
    `qk_trace` tr(W_QK), and the norms of W_QK used in Eq. (7): `norm_2`
    (spectral), `norm_fro`, `norm_1` (induced: max absolute column sum),
    `norm_l1` (entrywise: sum of absolute values).
  """
  w_qk = jnp.asarray(w_qk)
  _checks.square_matrix("w_qk", w_qk)
  d = w_qk.shape[-1]
  lam = softmax.temperature(temperature, d)
  w = symmetrize(w_qk)
  if cov is not None:
    _checks.square_matrix("cov", cov, d)
    w = w @ jnp.asarray(cov)
  trace = jnp.trace(w, axis1=-2, axis2=-1)
  trace_sq = jnp.einsum("...ij,...ji->...", w, w)   # tr(W^2) without W @ W
  root = jnp.sqrt(trace_sq)
  nonzero = trace_sq > 0   # a safe denominator keeps gradients finite
  xi = jnp.where(nonzero, trace / jnp.where(nonzero, root, 1.0), 0.0)
  scale = jnp.sum(w_qk**2, axis=(-2, -1))
  return dict(
      trace=trace, trace_sq=trace_sq, scale=scale,
      qk_trace=jnp.trace(w_qk, axis1=-2, axis2=-1), xi=xi, eta=root / lam,
      r=trace / lam,
      variance=d * trace_sq - trace**2,                       # Eq. (8)
      norm_2=jnp.linalg.norm(w_qk, ord=2, axis=(-2, -1)),
      norm_fro=jnp.sqrt(scale),
      norm_1=jnp.max(jnp.sum(jnp.abs(w_qk), axis=-2), axis=-1),
      norm_l1=jnp.sum(jnp.abs(w_qk), axis=(-2, -1)))
