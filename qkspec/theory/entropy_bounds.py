r"""Zhai et al.'s attention-entropy lower bound (Theorem 3.1) and its inputs.

Shapes: T = tokens (keys per attention row), d = token dimension.

Zhai et al. (2023), Theorem 3.1: with :math:`\sigma = \|W_K W_Q^\top\|_2`,
:math:`\sigma_x = \|XX^\top\|_2`, :math:`\boldsymbol\sigma = \sigma\sigma_x`
and :math:`\beta = \exp(-\boldsymbol\sigma\sqrt{T/(T-1)})`, every row of
:math:`A = \mathrm{softmax}(X W_Q W_K^\top X^\top)` satisfies

.. math:: \mathrm{Ent}(A_i) \ge \ln\big(1 + (T-1)\beta\big)
          + \frac{\boldsymbol\sigma\sqrt{T(T-1)}\,\beta}{1 + (T-1)\beta}.

Why (our reading, tests/collapse_test.py): a logit row :math:`s_i = X M x_i`
has :math:`\|s_i\|_2 \le \|M\|_2\|XX^\top\|_2`; of the rows with centred
norm at most :math:`\boldsymbol\sigma`, the least entropy has one key a gap
:math:`\delta = \boldsymbol\sigma\sqrt{T/(T-1)}` above T-1 equal others,
softmax :math:`(1, \beta, \dots, \beta)/(1 + (T-1)\beta)`,
:math:`\beta = e^{-\delta}`, whose entropy is the bound: it is tight, and
:math:`\ln T` at :math:`\boldsymbol\sigma = 0`.

Temperature. qkspec's logit matrix is :math:`M = W_{QK}/\lambda`, so
:math:`\nu = \|XX^\top\|_2\|W_{QK}\|_2/\lambda` (`entropy_bound_nu`). The
paper's Eq. (9) leaves :math:`\lambda` out, which overstates :math:`\nu` by
:math:`\sqrt d`: Zhai's (decreasing) bound stays valid but loose.

Eq. (9). As :math:`T \to \infty` Zhai's bound tends to
:math:`\ln(1 + Te^{-\nu}) + \nu e^{-\nu}/(T^{-1} + e^{-\nu})`
(`zhai_large_t_limit`). Eq. (9) as printed (`diagnostics.eq9_entropy`) has
:math:`e^{-\nu/2}` in the second numerator and :math:`\ln(1+T)` at
:math:`\nu = 0`; it exceeds Zhai's bound by
:math:`\nu(e^{-\nu/2} - e^{-\nu})/(T^{-1} + e^{-\nu})`, so it is no lower
bound where it exceeds the true minimum (qkspec/experiments/entropy_check.py
measures violations).

References:
  Zhai, Likhomanenko, Littwin, Busbridge, Ramapuram, Zhang, Gu, Susskind,
  Stabilizing Transformer Training by Preventing Attention Entropy Collapse,
  ICML 2023, arXiv:2303.06296, Theorem 3.1 (as restated in public notes on
  sigma-Reparam; re-derived and checked numerically here).
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

  `sigma` >= 0 is :math:`\boldsymbol\sigma = \|M\|_2\|XX^\top\|_2` for
  logits :math:`XMX^\top` (`entropy_bound_nu`), or any upper bound on a
  row's centred norm (a bound for that row); T >= 2 keys. Returns nats, the
  shape of `sigma`: :math:`\ln T` at 0, decreasing.
  """
  t = _checks.positive_int("seq_len", seq_len, minimum=2)
  _checks.nonnegative("sigma", sigma)
  sigma = jnp.asarray(sigma, dtype=jnp.result_type(float))
  beta = jnp.exp(-sigma * jnp.sqrt(t / (t - 1.0)))
  z = 1.0 + (t - 1) * beta
  return jnp.log(z) + sigma * jnp.sqrt(t * (t - 1.0)) * beta / z


def zhai_large_t_limit(nu: jax.Array, seq_len: int) -> jax.Array:
  r"""Zhai's bound with :math:`T-1 \to T`.

  .. math:: \ln(1+Te^{-\nu}) + \nu e^{-\nu}/(T^{-1}+e^{-\nu})

  The form the paper's Eq. (9) abbreviates; Eq. (9) as printed has
  :math:`e^{-\nu/2}` in place of the second :math:`e^{-\nu}`.
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

  x [..., T, d], `w_qk` [..., d, d] broadcasting with it; `temperature`
  None means :math:`\sqrt d`, 1.0 gives the paper's :math:`\nu`.
  Returns nu [...].
  """
  _checks.min_ndim("x", x_Txd, 2, "[..., T, d]")
  _checks.square_matrix("w_qk", w_qk, x_Txd.shape[-1])
  lam = softmax.temperature(temperature, x_Txd.shape[-1])
  sigma_x = jnp.linalg.norm(x_Txd, ord=2, axis=(-2, -1))**2
  return sigma_x * jnp.linalg.norm(w_qk, ord=2, axis=(-2, -1)) / lam


def centred_logit_norm(logits: jax.Array, axis: int = -1) -> jax.Array:
  r""":math:`\|s - \bar s\|_2` of each logit row, the sharpest :math:`\sigma`.

  `zhai_entropy_lower_bound(centred_logit_norm(s), T)` is the minimum entropy
  over all rows with the same centred norm (attained), so it lower-bounds
  the entropy of that very row.
  """
  _checks.seq_axis_length("logits", logits, axis)
  centred = logits - jnp.mean(logits, axis=axis, keepdims=True)
  return jnp.sqrt(jnp.sum(centred**2, axis=axis))
