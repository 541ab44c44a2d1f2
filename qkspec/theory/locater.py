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
:math:`[\mathrm{tr}(W_{QK}) - 1]\,\mathrm{tr}(W_{QK})\,W_K`. Since
:math:`d\,\mathrm{tr}(W_Q^\top W_K) = \langle dW_Q, W_K\rangle`, the chain
rule gives the factor 2 and no extra :math:`\mathrm{tr}(W_{QK})`;
tests/locater_test.py checks autodiff against the correct form.

W_QK from Flax kernels is `qkspec.training.model.qk_from_kernels`.
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp

from qkspec.theory import _checks
from qkspec.theory import spectrum


class LocaterHParams(NamedTuple):
  r"""LocATER's strengths and target: :math:`(\kappa_1, \kappa_2, \tau)`.

  A NamedTuple, so a JAX pytree: a sweep stacks one per member and vmaps
  over it. `LocaterHParams._fields` is the one list of its names (the
  config's `locater.*` fields and the sweepable keys).
  """
  kappa1: float | jax.Array = 0.0      # scale strength (0 = off)
  kappa2: float | jax.Array = 0.0      # mean strength (0 = off)
  target: float | jax.Array = 1.0      # tau, the eigen-sum held (paper: 1)


def locater_penalty(w_qk: jax.Array, kappa1: float, kappa2: float,
                    target: float = 1.0) -> jax.Array:
  r"""The LocATER penalty (Sec. 6).

  .. math:: \kappa_1\|W_{QK}\|_F^2 + \kappa_2(\mathrm{tr}\,W_{QK} - \tau)^2

  Args:
    w_qk: [..., d, d] (any array-like); leading axes (layers, heads) are
      kept.
    kappa1: scale strength :math:`\kappa_1 \ge 0`.
    kappa2: mean strength :math:`\kappa_2 \ge 0`.
    target: :math:`\tau`, the eigen-sum the penalty holds tr(W_QK) to.

  Returns:
    The penalty [...]; sum it over layers and heads for the loss.
  """
  w_qk = jnp.asarray(w_qk)
  _checks.square_matrix("w_qk", w_qk)
  _checks.nonnegative("kappa1", kappa1)
  _checks.nonnegative("kappa2", kappa2)
  # tr(W_QK^T W_QK) and tr(W_QK) (the sum of W_QK * I) as one reduction
  # over both: one kernel on a GPU, not two
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

  A model whose data loss barely pulls on :math:`W_{QK}` ends there. Two
  consequences for the paper's Sec. 7 (not stated in it):

  * With :math:`\kappa_1 > 0` fixed, both grow with :math:`\kappa_2`: the
    penalty on its own raises the scale as :math:`\kappa_2` rises. Fig. 6B's
    claim (a smaller scale with stronger :math:`\kappa_2`) can only come
    from the data loss.
  * Multiplying :math:`\kappa_1` and :math:`\kappa_2` by one factor (the
    fairseq reading divides both by the batch's token count) leaves
    :math:`W^*` unchanged; it changes only how hard the penalty pulls
    against the data loss.

  :math:`W_Q^\top W_K` reaches :math:`cI` when the head width D >= d (the
  paper's single-head models: :math:`W_Q = W_K = \sqrt c\,I`). With
  :math:`\kappa_1 = 0 < \kappa_2` every W with trace :math:`\tau`
  minimises; the formula gives the one of smallest scale,
  :math:`\tau I/d`. With :math:`\kappa_1 = \kappa_2 = 0` every W
  minimises: nan.

  Args:
    kappa1: scale strength :math:`\kappa_1 \ge 0` (array-like; broadcasts
      with kappa2 and target).
    kappa2: mean strength :math:`\kappa_2 \ge 0`.
    dim: d, the size of :math:`W_{QK}` (the model width).
    target: :math:`\tau`.

  Returns:
    `PenaltyMinimum(trace, scale)`.
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

