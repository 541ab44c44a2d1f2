r"""Softmax and its piecewise-linear approximation (paper Sec. 2).

Shapes: `omega` is `[..., T]` along `axis` (T = number of keys).

Softmax's Taylor expansion at 0 (:math:`\gamma^i = e^i/T - \mathbf 1/T^2`,
:math:`\gamma_0^i = 1/T`) gives the linearised score
:math:`u_i = (\omega_i - \bar\omega)/T + 1/T`; the piecewise-linear softmax
clips it to [0, 1], and Definition 1's event is :math:`u_i \in [0, 1]`.
"""
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import _checks


def temperature(value: Any, head_dim: int | None):
  r"""The softmax temperature :math:`\lambda`: `value`, or :math:`\sqrt D`.

  D = `head_dim` (the paper's d for its single head); the default is a
  numpy float32, so float32 and float64 callers see the same
  :math:`\lambda`. Raises ValueError for a concrete `value` <= 0, or for
  both arguments None (callers that see only traces must pass `value`).
  """
  if value is None:
    if head_dim is None:
      raise ValueError("temperature is required here (traces do not give "
                       "the token dimension d): pass temperature=sqrt(d).")
    return np.float32(np.sqrt(head_dim))
  _checks.positive("temperature", value)
  return value


def softmax(omega: jax.Array, axis: int = -1) -> jax.Array:
  r"""Softmax :math:`S(\omega)_i = e^{\omega_i}/\sum_j e^{\omega_j}`, Sec. 2."""
  _checks.seq_axis_length("omega", omega, axis, minimum=1)
  return jax.nn.softmax(omega, axis=axis)


def linearized_score(omega: jax.Array, axis: int = -1,
                     mask: jax.Array | None = None) -> jax.Array:
  r"""Softmax's first-order Taylor expansion at 0 (Sec. 2).

  .. math:: u_i = \langle \gamma^i, \omega\rangle + \gamma_0^i
                = (\omega_i - \bar\omega) / T + 1/T

  With `mask` (True where a key is visible, broadcast to `omega`), the
  softmax runs over the n visible keys alone: T becomes n and
  :math:`\bar\omega` their mean; a hidden key's :math:`\omega` is never
  read (it may be -inf) and its u is 1/n.
  """
  t = _checks.seq_axis_length("omega", omega, axis, minimum=1)
  if mask is None:
    mean = jnp.mean(omega, axis=axis, keepdims=True)
    return (omega - mean) / t + 1.0 / t
  mask = jnp.broadcast_to(mask, jnp.shape(omega)).astype(bool)
  n = jnp.maximum(jnp.sum(mask, axis=axis, keepdims=True), 1)
  mean = jnp.sum(jnp.where(mask, omega, 0.0), axis=axis, keepdims=True) / n
  return (jnp.where(mask, omega, mean) - mean) / n + 1.0 / n


def piecewise_linear_softmax(omega: jax.Array, axis: int = -1) -> jax.Array:
  r"""The piecewise-linear softmax of Sec. 2 (need not sum to one).

  .. math:: \tilde S(\omega)_i = \max\{0, \min\{1, u_i\}\}
  """
  return jnp.clip(linearized_score(omega, axis), 0.0, 1.0)


def propagation_mask(omega: jax.Array, axis: int = -1,
                     mask: jax.Array | None = None) -> jax.Array:
  r"""Boolean event :math:`u_i \in [0, 1]` of Definition 1 (closed
  interval); with `mask`, over the visible keys (`linearized_score`), and
  False for a hidden one."""
  u = linearized_score(omega, axis, mask)
  event = (u >= 0.0) & (u <= 1.0)
  return event if mask is None else event & jnp.broadcast_to(
      mask, event.shape).astype(bool)
