r"""QK-eigenspectrum statistics (Eqs. 5, 7, 8) and controlled spectra (Fig. 5).

Shapes: d = token dimension, H (or N) = heads, K = key heads, D = head
width; the statistics of [..., d, d] matrices accept leading batch axes.

:math:`W_{QK} = W_Q^\top W_K` of a model comes from its query and key
kernels (`qk_from_kernels`); its statistics come from them too, through
[D, D] products (`kernel_spectrum_stats`), so that a model's d x d
matrices need never be built.

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
import numpy as np

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


def _grouped(wq_kernel: jax.Array, wk_kernel: jax.Array
             ) -> tuple[jax.Array, jax.Array]:
  """The kernels as [d, K, N/K, D] (query) and [d, K, D] (key): query head
  h = k (N/K) + g reads key head k = h // (N/K). ValueError unless they are
  [d, D] each or [d, N, D] and [d, K, D] with K dividing N."""
  wq_kernel, wk_kernel = jnp.asarray(wq_kernel), jnp.asarray(wk_kernel)
  q_shape, k_shape = jnp.shape(wq_kernel), jnp.shape(wk_kernel)
  if wq_kernel.ndim == 2 and q_shape == k_shape:
    return wq_kernel[:, None, None, :], wk_kernel[:, None, :]
  if wq_kernel.ndim == 2 or wq_kernel.ndim != wk_kernel.ndim:
    raise ValueError("wq_kernel and wk_kernel must be [d, D] each or [d, N, "
                     f"D] and [d, K, D], got {q_shape} and {k_shape}.")
  if wq_kernel.ndim != 3:
    raise ValueError("kernels must be [d, D] or [d, H, D], got shape "
                     f"{q_shape}.")
  (d, N, D), K = q_shape, k_shape[1]
  if (k_shape[0], k_shape[2]) != (d, D) or N % K:
    raise ValueError("a query kernel [d, N, D] needs a key kernel [d, K, D] "
                     f"with K dividing N (grouped-query), got {q_shape} and "
                     f"{k_shape}.")
  return wq_kernel.reshape(d, K, N // K, D), wk_kernel


def qk_from_kernels(wq_kernel: jax.Array, wk_kernel: jax.Array) -> jax.Array:
  r""":math:`W_{QK} = W_Q^\top W_K` from Flax `Dense`/`DenseGeneral` kernels.

  A Flax kernel maps rows (`q = x @ kernel`), so :math:`W_Q` is
  `wq_kernel.T` and :math:`W_{QK}` = `wq_kernel @ wk_kernel.T`: [d, d] of
  [d, D] kernels, [N, d, d] of [d, N, D] and [d, K, D] ones, query head h
  reading key head h // (N/K) (grouped-query attention; K = N is
  multi-head, K = 1 multi-query). N d^2 numbers: `kernel_spectrum_stats`
  has what the statistics need without them.
  """
  q, k = _grouped(wq_kernel, wk_kernel)
  w_qk = jnp.einsum("ikgf,jkf->kgij", q, k)
  return _heads(w_qk, wq_kernel)


def _heads(x_KxG: jax.Array, wq_kernel: jax.Array) -> jax.Array:
  """Per-head values [K, N/K, ...] as [N, ...] (or [...] for [d, D]
  kernels)."""
  if np.ndim(wq_kernel) == 3:
    return x_KxG.reshape(-1, *x_KxG.shape[2:])
  return x_KxG[0, 0]


def kernel_qk_trace(wq_kernel: jax.Array, wk_kernel: jax.Array) -> jax.Array:
  r""":math:`\mathrm{tr}\,W_{QK}` per head without :math:`W_{QK}`.

  With :math:`Q` = `wq_kernel[:, h]` and :math:`K` = `wk_kernel[:, h //
  (N/K)]` ([d, D] each) and :math:`W_{QK} = QK^\top`, the trace is cyclic:
  :math:`\mathrm{tr}(QK^\top) = \sum_{ij} Q_{ij}K_{ij}`. Kernels as
  `qk_from_kernels`; [N] (or [] for [d, D] kernels).
  """
  q, k = _grouped(wq_kernel, wk_kernel)
  return _heads(jnp.einsum("ikgf,ikf->kg", q, k), wq_kernel)


def kernel_scale(wq_kernel: jax.Array, wk_kernel: jax.Array) -> jax.Array:
  r"""The scale :math:`\mathrm{tr}(W_{QK}^\top W_{QK})` per head from
  [D, D] products.

  .. math:: \mathrm{tr}(KQ^\top QK^\top)
            = \mathrm{tr}\big((Q^\top Q)(K^\top K)\big)
            = \sum_{ef} (Q^\top Q)_{ef} (K^\top K)_{ef}

  (cyclic trace; both factors symmetric). Kernels and heads as
  `kernel_qk_trace`: d D^2 operations a head, never d^2 numbers.
  """
  q, k = _grouped(wq_kernel, wk_kernel)
  qq_KxGxDxD = jnp.einsum("ikge,ikgf->kgef", q, q)
  kk_KxDxD = jnp.einsum("ike,ikf->kef", k, k)
  return _heads(jnp.einsum("kgef,kef->kg", qq_KxGxDxD, kk_KxDxD), wq_kernel)


def _qk_square_trace(wq_kernel: jax.Array, wk_kernel: jax.Array
                     ) -> jax.Array:
  r""":math:`\mathrm{tr}(W_{QK}^2) = \mathrm{tr}(QK^\top QK^\top) =
  \mathrm{tr}\big((K^\top Q)^2\big)` per head (cyclic trace)."""
  q, k = _grouped(wq_kernel, wk_kernel)
  kq_KxGxDxD = jnp.einsum("ike,ikgf->kgef", k, q)          # K^T Q
  return _heads(jnp.einsum("kgef,kgfe->kg", kq_KxGxDxD, kq_KxGxDxD),
                wq_kernel)


def kernel_spectrum_stats(wq_kernel: jax.Array, wk_kernel: jax.Array,
                          temperature: float | jax.Array | None = None
                          ) -> dict[str, jax.Array]:
  r"""`spectrum_stats`' `trace`, `trace_sq`, `scale`, `xi`, `eta` and `r`
  at :math:`\Sigma = I` from the kernels, never building :math:`W_{QK}`.

  Per head of `qk_from_kernels`' kernels: :math:`\mathrm{tr}\,W =
  \mathrm{tr}\,W_{QK}` (`kernel_qk_trace`), the scale (`kernel_scale`)
  and :math:`\mathrm{tr}(W^2)`: :math:`W^2 = (W_{QK}^2 + W_{QK}W_{QK}^\top
  + W_{QK}^\top W_{QK} + W_{QK}^{\top 2})/4`, whose four traces pair up,

  .. math:: \mathrm{tr}(W^2) = \tfrac12\big(\mathrm{tr}(W_{QK}^2)
            + \mathrm{tr}(W_{QK}^\top W_{QK})\big),\qquad
            \mathrm{tr}(W_{QK}^2) = \mathrm{tr}\big((K^\top Q)^2\big);

  `temperature` :math:`\lambda`, None = :math:`\sqrt D`. Each is a
  function of the [D, D] products :math:`Q^\top Q`, :math:`K^\top K`,
  :math:`K^\top Q`: at d = 4096, N = 32, D = 128 a layer needs 32 x 3
  such products, not 32 matrices of 4096 x 4096.
  """
  lam = softmax.temperature(temperature, jnp.shape(wq_kernel)[-1])
  trace = kernel_qk_trace(wq_kernel, wk_kernel)
  scale = kernel_scale(wq_kernel, wk_kernel)
  trace_sq = 0.5 * (_qk_square_trace(wq_kernel, wk_kernel) + scale)
  return dict(trace=trace, trace_sq=trace_sq, scale=scale,
              **_ratios(trace, trace_sq, lam))


def _ratios(trace: jax.Array, trace_sq: jax.Array, lam) -> dict[str, jax.Array]:
  r""":math:`\xi = \mathrm{tr}W/\sqrt{\mathrm{tr}W^2}` (0 at W = 0),
  :math:`\eta = \sqrt{\mathrm{tr}W^2}/\lambda` (Eq. 6) and :math:`r =
  \xi\eta = \mathrm{tr}W/\lambda` (Lemma 2)."""
  root = jnp.sqrt(trace_sq)
  nonzero = trace_sq > 0   # a safe denominator keeps gradients finite
  xi = jnp.where(nonzero, trace / jnp.where(nonzero, root, 1.0), 0.0)
  return dict(xi=xi, eta=root / lam, r=trace / lam)


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
  scale = jnp.sum(w_qk**2, axis=(-2, -1))
  return dict(
      trace=trace, trace_sq=trace_sq, scale=scale,
      qk_trace=jnp.trace(w_qk, axis1=-2, axis2=-1),
      **_ratios(trace, trace_sq, lam),
      variance=d * trace_sq - trace**2,                       # Eq. (8)
      norm_2=jnp.linalg.norm(w_qk, ord=2, axis=(-2, -1)),
      norm_fro=jnp.sqrt(scale),
      norm_1=jnp.max(jnp.sum(jnp.abs(w_qk), axis=-2), axis=-1),
      norm_l1=jnp.sum(jnp.abs(w_qk), axis=(-2, -1)))
