r"""Zhai et al.'s attention-entropy lower bound (Theorem 3.1) and its inputs.

Shapes: T = tokens (keys per attention row), d = token dimension.

Every row of :math:`\mathrm{softmax}(XMX^\top)` has at least the entropy of
one key :math:`\boldsymbol\sigma\sqrt{T/(T-1)}` above T-1 equal others,
:math:`\boldsymbol\sigma = \|M\|_2\|XX^\top\|_2` (tight; re-derived and
checked in tests/theory/entropy_bounds_test.py). qkspec's M is
:math:`W_{QK}/\lambda` (`entropy_bound_nu`); the paper's Eq. (9) leaves
:math:`\lambda` out and, as printed (`diagnostics.eq9_entropy`), has
:math:`e^{-\nu/2}` where the large-T bound (`zhai_large_t_limit`) has
:math:`e^{-\nu}`: it is no lower bound (qkspec/experiments/entropy_check.py).

References:
  Zhai, Likhomanenko, Littwin, Busbridge, Ramapuram, Zhang, Gu, Susskind,
  Stabilizing Transformer Training by Preventing Attention Entropy Collapse,
  ICML 2023, arXiv:2303.06296, Theorem 3.1.
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.theory import _checks
from qkspec.theory import softmax


def zhai_entropy_lower_bound(sigma: jax.Array, seq_len: int) -> jax.Array:
  r"""Zhai et al. (2023), Theorem 3.1: the minimum entropy of a T-key row.

  .. math:: \ln(1 + (T-1)\beta) + \frac{\sigma\sqrt{T(T-1)}\,\beta}
            {1 + (T-1)\beta},\qquad \beta = e^{-\sigma\sqrt{T/(T-1)}}

  `sigma` >= 0: :math:`\|M\|_2\|XX^\top\|_2` for logits :math:`XMX^\top`
  (`entropy_bound_nu`), or any bound on a row's centred norm; T >= 2.
  Returns nats, the shape of `sigma`.
  """
  t = _checks.positive_int("seq_len", seq_len, minimum=2)
  _checks.nonnegative("sigma", sigma)
  sigma = jnp.asarray(sigma, dtype=jnp.result_type(float))
  beta = jnp.exp(-sigma * jnp.sqrt(t / (t - 1.0)))
  z = 1.0 + (t - 1) * beta
  return jnp.log(z) + sigma * jnp.sqrt(t * (t - 1.0)) * beta / z


def zhai_large_t_limit(nu: jax.Array, seq_len: int) -> jax.Array:
  r"""Zhai's bound with :math:`T-1 \to T`, the form Eq. (9) abbreviates.

  .. math:: \ln(1+Te^{-\nu}) + \nu e^{-\nu}/(T^{-1}+e^{-\nu})
  """
  t = _checks.positive_int("seq_len", seq_len, minimum=1)
  _checks.nonnegative("nu", nu)
  nu = jnp.asarray(nu, dtype=jnp.result_type(float))
  return jnp.log1p(t * jnp.exp(-nu)) + nu * jnp.exp(-nu) / (1.0 / t
                                                             + jnp.exp(-nu))


def entropy_bound_nu(x_Txd: jax.Array, w_qk: jax.Array,
                     temperature: float | jax.Array | None = None
                     ) -> jax.Array:
  r""":math:`\nu = \|XX^\top\|_2\,\|W_{QK}\|_2/\lambda`, both bounds' argument.

  x [..., T, d], `w_qk` [..., d, d]; `temperature` 1.0 gives the paper's
  :math:`\nu`. Returns nu [...].
  """
  _checks.min_ndim("x", x_Txd, 2, "[..., T, d]")
  _checks.square_matrix("w_qk", w_qk, x_Txd.shape[-1])
  lam = softmax.temperature(temperature, x_Txd.shape[-1])
  sigma_x = jnp.linalg.norm(x_Txd, ord=2, axis=(-2, -1))**2
  return sigma_x * jnp.linalg.norm(w_qk, ord=2, axis=(-2, -1)) / lam


def centred_logit_norm(logits: jax.Array, axis: int = -1) -> jax.Array:
  r""":math:`\|s - \bar s\|_2` of each logit row, the sharpest :math:`\sigma`.

  `zhai_entropy_lower_bound(centred_logit_norm(s), T)` bounds that row.
  """
  _checks.seq_axis_length("logits", logits, axis)
  centred = logits - jnp.mean(logits, axis=axis, keepdims=True)
  return jnp.sqrt(jnp.sum(centred**2, axis=axis))
