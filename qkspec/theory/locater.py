r"""The LocATER penalty (paper Sec. 6).

Shapes: d = model width, D = head width.

.. math:: \kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK})
          + \kappa_2\,(\mathrm{tr}(W_{QK}) - \tau)^2,\qquad \tau = 1
          \text{ in the paper.}

Gradients come from autodiff. In the paper's orientation
(:math:`W_{QK} = W_Q^\top W_K`, :math:`W_Q, W_K \in \mathbb R^{D \times d}`):

.. math:: \nabla_{W_Q}\mathrm{tr}(W_{QK}^\top W_{QK}) = 2 W_K W_K^\top W_Q,
          \qquad
          \nabla_{W_Q}(\mathrm{tr}\,W_{QK} - \tau)^2
          = 2(\mathrm{tr}\,W_{QK} - \tau)\,W_K.

Erratum: the paper prints the second as
:math:`[\mathrm{tr}(W_{QK}) - 1]\,\mathrm{tr}(W_{QK})\,W_K`; since
:math:`d\,\mathrm{tr}(W_Q^\top W_K) = \langle dW_Q, W_K\rangle`, the chain
rule gives the factor 2 and no extra :math:`\mathrm{tr}(W_{QK})`
(tests/locater_test.py). W_QK of Flax kernels: `training.model.qk_from_kernels`.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp

from qkspec.theory import _checks
from qkspec.theory import spectrum


class LocaterHParams(NamedTuple):
  r"""LocATER's strengths and target: :math:`(\kappa_1, \kappa_2, \tau)`.

  A pytree, so a sweep stacks one per member and vmaps over it; `_fields`
  are the config's `locater.*` fields.
  """
  kappa1: float | jax.Array = 0.0      # scale strength (0 = off)
  kappa2: float | jax.Array = 0.0      # mean strength (0 = off)
  target: float | jax.Array = 1.0      # tau, the eigen-sum held (paper: 1)


def locater_penalty(w_qk: jax.Array, kappa1: float, kappa2: float,
                    target: float = 1.0) -> jax.Array:
  r"""The LocATER penalty (Sec. 6).

  .. math:: \kappa_1\|W_{QK}\|_F^2 + \kappa_2(\mathrm{tr}\,W_{QK} - \tau)^2

  Returns the penalty [...] of `w_qk` [..., d, d], keeping the leading axes
  (layers, heads): sum it for the loss.
  """
  w_qk = jnp.asarray(w_qk)
  _checks.square_matrix("w_qk", w_qk)
  _checks.nonnegative("kappa1", kappa1)
  _checks.nonnegative("kappa2", kappa2)
  # tr(W_QK^T W_QK) and tr(W_QK) = sum(W_QK * I) as one reduction (one
  # GPU kernel, not two)
  eye = jnp.broadcast_to(jnp.eye(w_qk.shape[-1], dtype=w_qk.dtype),
                         w_qk.shape)
  scale, trace = jnp.sum(jnp.stack([w_qk**2, w_qk * eye]), axis=(-2, -1))
  return kappa1 * scale + kappa2 * (trace - target)**2


class PenaltyMinimum(NamedTuple):
  r"""LocATER's own minimum :math:`W^* = cI` (`penalty_minimum`)."""
  trace: jax.Array   # tr W* = d c
  scale: jax.Array   # tr(W*^T W*) = d c^2 = (tr W*)^2 / d


def penalty_minimum(kappa1, kappa2, dim: int,
                    target=1.0) -> PenaltyMinimum:
  r"""Where the penalty alone puts :math:`W_{QK}`: :math:`W^* = cI`.

  The gradient of the penalty (Sec. 6),
  :math:`2\kappa_1 W + 2\kappa_2(\mathrm{tr}\,W - \tau) I`, vanishes only
  at :math:`W = cI` with :math:`c(\kappa_1 + \kappa_2 d) = \kappa_2\tau`,
  and for :math:`\kappa_1 > 0` the penalty is strictly convex in
  :math:`W_{QK}`, so this is its unique minimum:

  .. math:: \mathrm{tr}\,W^* = \frac{\kappa_2 d\,\tau}{\kappa_1 + \kappa_2 d},
            \qquad \mathrm{tr}(W^{*\top} W^*) = \frac{(\mathrm{tr}\,W^*)^2}{d}.

  A model whose data loss barely pulls on :math:`W_{QK}` ends there. So
  (not stated in Sec. 7): with :math:`\kappa_1 > 0` fixed the penalty alone
  raises the scale as :math:`\kappa_2` rises, and Fig. 6B's smaller scale
  with stronger :math:`\kappa_2` can only come from the data loss; scaling
  both kappas by one factor (the fairseq reading) leaves :math:`W^*` as is
  and changes only how hard it pulls against the data loss.

  :math:`W_Q^\top W_K` reaches :math:`cI` when the head width D >= d. With
  :math:`\kappa_1 = 0 < \kappa_2` every W of trace :math:`\tau` minimises
  and this is the one of least scale, :math:`\tau I/d`; with both zero,
  nan. `kappa1`, `kappa2` and `target` broadcast; `dim` is d.
  """
  d = _checks.positive_int("dim", dim)
  _checks.nonnegative("kappa1", kappa1)
  _checks.nonnegative("kappa2", kappa2)
  kappa1, kappa2, target = (jnp.asarray(x, float)
                            for x in (kappa1, kappa2, target))
  denominator = kappa1 + kappa2 * d
  trace = jnp.where(denominator > 0, kappa2 * d * target
                    / jnp.where(denominator > 0, denominator, 1.0), jnp.nan)
  return PenaltyMinimum(trace=trace, scale=spectrum.scale_floor(trace, d))

