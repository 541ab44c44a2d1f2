r"""The LocATER penalty (paper Sec. 6).

Shapes: d = model width, D = head width.

.. math:: \kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK})
          + \kappa_2\,(\mathrm{tr}(W_{QK}) - \tau)^2,\qquad \tau = 1
          \text{ in the paper.}

Gradients come from autodiff. Erratum: for :math:`W_{QK} = W_Q^\top W_K`
the paper prints :math:`\nabla_{W_Q}(\mathrm{tr}\,W_{QK} - 1)^2 =
[\mathrm{tr}(W_{QK}) - 1]\,\mathrm{tr}(W_{QK})\,W_K`; the chain rule gives
:math:`2(\mathrm{tr}\,W_{QK} - 1)\,W_K` (tests/theory/locater_test.py).
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp

from qkspec.theory import _checks
from qkspec.theory import spectrum
# (kappa1, kappa2, tau), defined where the config layer reads its fields
# without jax
from qkspec.theory._locater_hparams import LocaterHParams  # noqa: F401


def locater_penalty(w_qk: jax.Array, kappa1: float, kappa2: float,
                    target: float = 1.0) -> jax.Array:
  r"""The LocATER penalty (Sec. 6).

  .. math:: \kappa_1\|W_{QK}\|_F^2 + \kappa_2(\mathrm{tr}\,W_{QK} - \tau)^2

  of `w_qk` [..., d, d]: [...], to be summed for the loss.
  """
  w_qk = jnp.asarray(w_qk)
  _checks.square_matrix("w_qk", w_qk)
  # tr(W_QK^T W_QK) and tr(W_QK) = sum(W_QK * I) as one reduction (one
  # GPU kernel, not two)
  eye = jnp.broadcast_to(jnp.eye(w_qk.shape[-1], dtype=w_qk.dtype),
                         w_qk.shape)
  scale, trace = jnp.sum(jnp.stack([w_qk**2, w_qk * eye]), axis=(-2, -1))
  return penalty_from_traces(scale, trace, kappa1, kappa2, target)


def kernel_locater_penalty(wq_kernel: jax.Array, wk_kernel: jax.Array,
                           kappa1: float, kappa2: float,
                           target: float = 1.0) -> jax.Array:
  r"""`locater_penalty` of :math:`W_{QK}` = `wq_kernel @ wk_kernel.T` per
  head, from the kernels alone.

  Kernels as `spectrum.qk_from_kernels` ([d, D], or [d, N, D] and
  [d, K, D]); the scale and trace come from `spectrum.kernel_scale` and
  `spectrum.kernel_qk_trace`, [D, D] products, so its value and gradient
  are those of `locater_penalty(qk_from_kernels(...))` without d x d
  matrices. [N] (or []).
  """
  return penalty_from_traces(spectrum.kernel_scale(wq_kernel, wk_kernel),
                             spectrum.kernel_qk_trace(wq_kernel, wk_kernel),
                             kappa1, kappa2, target)


def penalty_from_traces(scale: jax.Array, qk_trace: jax.Array,
                        kappa1: float, kappa2: float,
                        target: float = 1.0) -> jax.Array:
  r""":math:`\kappa_1 s + \kappa_2 (t - \tau)^2` of the scale
  :math:`s = \mathrm{tr}(W_{QK}^\top W_{QK})` and trace :math:`t =
  \mathrm{tr}\,W_{QK}` (Sec. 6); kappas checked non-negative."""
  _checks.nonnegative("kappa1", kappa1)
  _checks.nonnegative("kappa2", kappa2)
  return kappa1 * scale + kappa2 * (qk_trace - target)**2


class PenaltyMinimum(NamedTuple):
  r"""LocATER's own minimum :math:`W^* = cI` (`penalty_minimum`)."""
  trace: jax.Array   # tr W* = d c
  scale: jax.Array   # tr(W*^T W*) = d c^2 = (tr W*)^2 / d


def penalty_minimum(kappa1, kappa2, dim: int,
                    target=1.0) -> PenaltyMinimum:
  r"""Where the penalty alone puts :math:`W_{QK}`: :math:`W^* = cI`.

  The gradient :math:`2\kappa_1 W + 2\kappa_2(\mathrm{tr}\,W - \tau) I`
  vanishes only at :math:`c(\kappa_1 + \kappa_2 d) = \kappa_2\tau`, the
  unique minimum for :math:`\kappa_1 > 0` (strict convexity):

  .. math:: \mathrm{tr}\,W^* = \frac{\kappa_2 d\,\tau}{\kappa_1 + \kappa_2 d},
            \qquad \mathrm{tr}(W^{*\top} W^*) = \frac{(\mathrm{tr}\,W^*)^2}{d}.

  So with :math:`\kappa_1` fixed the penalty alone raises the scale as
  :math:`\kappa_2` rises (Fig. 6B's smaller scale can only come from the
  data loss), and scaling both kappas (the fairseq reading) leaves
  :math:`W^*` as is. With :math:`\kappa_1 = 0 < \kappa_2`: the minimiser
  of least scale, :math:`\tau I/d`; both zero: nan. The arguments
  broadcast; `dim` is d.
  """
  _checks.nonnegative("kappa1", kappa1)
  _checks.nonnegative("kappa2", kappa2)
  kappa1, kappa2, target = (jnp.asarray(x, float)
                            for x in (kappa1, kappa2, target))
  denominator = kappa1 + kappa2 * dim
  trace = jnp.where(denominator > 0, kappa2 * dim * target
                    / jnp.where(denominator > 0, denominator, 1.0), jnp.nan)
  return PenaltyMinimum(trace=trace, scale=spectrum.scale_floor(trace, dim))

