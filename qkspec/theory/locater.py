r"""The LocATER penalty (paper Sec. 6) and W_QK from Flax kernels.

Shapes: d = model width, D = head width, H = heads.

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
"""
from typing import NamedTuple

import jax
import jax.numpy as jnp

from qkspec.theory import _checks


def qk_matrix(wq_kernel: jax.Array, wk_kernel: jax.Array) -> jax.Array:
  r""":math:`W_{QK} = W_Q^\top W_K` from Flax `Dense` kernels.

  A Flax kernel maps rows, `q = x @ kernel`, so the paper's
  :math:`W_Q` (:math:`D \times d`) is `wq_kernel.T` and

  .. math:: W_{QK} = \texttt{wq\_kernel} \cdot \texttt{wk\_kernel}^\top,\qquad
            q_t^\top k_j = x_t^\top W_{QK} x_j.

  Args:
    wq_kernel: [d, D], or [d, H, D] (`DenseGeneral` with heads).
    wk_kernel: same shape.

  Returns:
    W_QK [d, d], or [H, d, d] per head.
  """
  if jnp.shape(wq_kernel) != jnp.shape(wk_kernel):
    raise ValueError("wq_kernel and wk_kernel must have the same shape, got "
                     f"{jnp.shape(wq_kernel)} and {jnp.shape(wk_kernel)}.")
  if wq_kernel.ndim == 2:
    return wq_kernel @ wk_kernel.T
  if wq_kernel.ndim == 3:
    return jnp.einsum("ihk,jhk->hij", wq_kernel, wk_kernel)
  raise ValueError("kernels must be [d, D] or [d, H, D], got shape "
                   f"{jnp.shape(wq_kernel)}.")


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
  r"""LocATER (Sec. 6): :math:`\kappa_1\|W_{QK}\|_F^2 + \kappa_2(\mathrm{tr}\,W_{QK} - \tau)^2`.

  Args:
    w_qk: [..., d, d]; leading axes (layers, heads) are kept.
    kappa1: scale strength :math:`\kappa_1 \ge 0`.
    kappa2: mean strength :math:`\kappa_2 \ge 0`.
    target: :math:`\tau`, the eigen-sum the penalty holds tr(W_QK) to.

  Returns:
    The penalty [...]; sum it over layers and heads for the loss.
  """
  _checks.square_matrix("w_qk", w_qk)
  _checks.nonnegative("kappa1", kappa1)
  _checks.nonnegative("kappa2", kappa2)
  scale = jnp.sum(w_qk**2, axis=(-2, -1))              # tr(W_QK^T W_QK)
  trace = jnp.trace(w_qk, axis1=-2, axis2=-1)
  return kappa1 * scale + kappa2 * (trace - target)**2
