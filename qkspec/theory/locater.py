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

W_QK from Flax kernels is `qkspec.training.model.qk_from_kernels`; the old
`locater.qk_matrix` still resolves to it (lazily, so that importing the
maths does not import Flax) and warns.
"""
import importlib
from typing import NamedTuple
import warnings

import jax
import jax.numpy as jnp

from qkspec.theory import _checks


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
  scale = jnp.sum(w_qk**2, axis=(-2, -1))              # tr(W_QK^T W_QK)
  trace = jnp.trace(w_qk, axis1=-2, axis2=-1)
  return kappa1 * scale + kappa2 * (trace - target)**2


def __getattr__(name: str):
  """The deprecated `qk_matrix`: `qkspec.training.model.qk_from_kernels`."""
  if name != "qk_matrix":
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  warnings.warn("qkspec.theory.locater.qk_matrix is now "
                "qkspec.training.model.qk_from_kernels (W_QK from Flax "
                "kernels is model wiring, not maths).", DeprecationWarning,
                stacklevel=2)
  return importlib.import_module("qkspec.training.model").qk_from_kernels
