r"""Dong et al.'s path view of a SAN (Sec. 2) and a cubic residual bound.

Shapes: L = layers, H = heads, T = tokens, d = token dimension, K = paths.

L pure layers :math:`X \mapsto \sum_h P_h X W_h` sum over the :math:`H^L`
head sequences ("paths"), :math:`X^L = \sum_\pi P^L_{h_L} \cdots
P^1_{h_1} X W^1_{h_1} \cdots W^L_{h_L}`, with the full network's attention;
with skips a fraction :math:`\binom Lk H^k/(H+1)^L` of the paths uses k
attention layers (Dong et al., Sec. 3.1). A Frobenius variant of Dong's
Lemma 2.1, derived here from the softmax Jacobian's norm <= 1/2 and
:math:`\mathrm{res}(PXW) = (I - \mathbf 1\mathbf 1^\top/T)(P - \mathbf 1
p^\top) R W`, gives the doubly exponential collapse of Theorem 2.2:

.. math:: \|\mathrm{res}(\mathrm{SA}(X))\|_F \le c\,\|\mathrm{res}(X)\|_F^3,
          \qquad c = \sum_h \frac{\|W_{QK,h}\|_2 \|W_h\|_2}{2\lambda}.

References:
  Dong, Cordonnier, Loukas, Attention is Not All You Need: Pure Attention
  Loses Rank Doubly Exponentially with Depth, ICML 2021, arXiv:2103.03404.
"""
# pylint: disable=invalid-name
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import _checks
from qkspec.theory import softmax

MAX_PATHS = 4096   # enumerating more paths than this is refused


def enumerate_paths(x_Txd: jax.Array, probs_LxHxTxT: jax.Array,
                    w_v_LxHxdxd: jax.Array) -> tuple[jax.Array, np.ndarray]:
  r"""Every single-head path output (Dong et al., Sec. 2.2, no skip).

  .. math:: Y_\pi = P^L_{h_L} \cdots P^1_{h_1} X W^1_{h_1} \cdots W^L_{h_L}

  `probs_LxHxTxT`: the full network's attention (`san.forward`'s "probs").
  Returns (y_KxTxd, heads_KxL): the K = H^L path outputs, summing to the
  pure SAN's output, and each path's heads (the last layer's fastest).
  """
  L, H = probs_LxHxTxT.shape[:2]
  if H**L > MAX_PATHS:
    raise ValueError(f"H^L = {H}^{L} paths exceed MAX_PATHS = {MAX_PATHS}; "
                     "use path_length_components for sums over paths.")
  heads_KxL = np.array(list(itertools.product(range(H), repeat=L)),
                       dtype=np.int32).reshape(-1, L)
  layers_L = np.arange(L)

  def one_path(heads_L):
    p_LxTxT = probs_LxHxTxT[layers_L, heads_L]
    w_Lxdxd = w_v_LxHxdxd[layers_L, heads_L]

    def body(y, pw):
      p, w = pw
      return p @ y @ w, None

    y, _ = jax.lax.scan(body, x_Txd, (p_LxTxT, w_Lxdxd))
    return y

  return jax.vmap(one_path)(jnp.asarray(heads_KxL)), heads_KxL


def path_length_components(x_Txd: jax.Array, probs_LxHxTxT: jax.Array,
                           w_v_LxHxdxd: jax.Array) -> jax.Array:
  r"""Sums of the skip-SAN paths by length (number of attention layers used).

  With :math:`X^{l+1} = X^l + \sum_h P^l_h X^l W^l_h`, the sum
  :math:`Z^l_k` of the paths of length k after l layers obeys

  .. math:: Z^{l+1}_k = Z^l_k + \sum_h P^l_h Z^l_{k-1} W^l_h,
            \qquad Z^0_0 = X,

  so :math:`\sum_k Z^L_k = X^L` in O(L^2 H) products. Returns z_KxTxd,
  K = L + 1.
  """
  L = probs_LxHxTxT.shape[0]
  z = jnp.zeros((L + 1,) + x_Txd.shape, x_Txd.dtype).at[0].set(x_Txd)

  def body(z_KxTxd, pw):
    return attention_layer_paths(z_KxTxd, *pw), None

  z, _ = jax.lax.scan(body, z, (probs_LxHxTxT, w_v_LxHxdxd))
  return z


def attention_layer_paths(z_KxTxd: jax.Array, p_HxTxT: jax.Array,
                          w_Hxdxd: jax.Array) -> jax.Array:
  r"""One skip attention layer on path-length components (fixed attention):
  :math:`Z_k \leftarrow Z_k + \sum_h P_h Z_{k-1} W_h`."""
  mixed = jnp.einsum("htj,kjd,hde->kte", p_HxTxT, z_KxTxd, w_Hxdxd)
  return z_KxTxd + jnp.concatenate([jnp.zeros_like(mixed[:1]), mixed[:-1]],
                                   axis=0)


def path_length_fractions(num_layers: int, num_heads: int) -> np.ndarray:
  r"""Fraction of skip-SAN paths of each length k = 0..L (Dong, Sec. 3.1).

  .. math:: \binom{L}{k} H^k / (H + 1)^L
  """
  L = _checks.positive_int("num_layers", num_layers)
  H = _checks.positive_int("num_heads", num_heads)
  total = (H + 1)**L
  return np.array([math.comb(L, k) * H**k / total for k in range(L + 1)])


def cubic_residual_coefficient(w_qk_LxHxdxd: jax.Array,
                               w_v_LxHxdxd: jax.Array,
                               temperature: float | jax.Array | None = None
                               ) -> jax.Array:
  r"""c [L], :math:`c_l = \sum_h \|W^l_{QK,h}\|_2\|W^l_h\|_2/(2\lambda)`,
  the cubic bound's constant (module docstring)."""
  _checks.square_matrix("w_qk", w_qk_LxHxdxd)
  temperature = softmax.temperature(temperature,
                                    np.shape(w_qk_LxHxdxd)[-1])
  norm_qk = jnp.linalg.norm(w_qk_LxHxdxd, ord=2, axis=(-2, -1))
  norm_v = jnp.linalg.norm(w_v_LxHxdxd, ord=2, axis=(-2, -1))
  return jnp.sum(norm_qk * norm_v, axis=-1) / (2.0 * temperature)


def cubic_residual_bound(residual0: jax.Array, coeffs_L: jax.Array
                         ) -> jax.Array:
  r"""The bound :math:`B_{l+1} = c_l B_l^3`, :math:`B_0 = \|res(X^0)\|_F`.

  B [L+1] bounds the pure SAN's `rank_collapse_residual(X^l, "mean")`
  (in log space: tiny values underflow to 0, not NaN).
  """
  def body(log_b, log_c):
    nxt = log_c + 3.0 * log_b
    return nxt, nxt

  log_b0 = jnp.log(residual0)
  _, logs = jax.lax.scan(body, log_b0, jnp.log(coeffs_L))
  return jnp.exp(jnp.concatenate([log_b0[None], logs]))
