r"""A skip SAN (with or without MLPs) evaluated on its paths of length <= k.

Shapes: L = layers, H = heads, T = tokens, d = token dimension, F = MLP
width, K = L + 1 path lengths.

A path's length is the number of attention layers it goes through (Dong et
al., Secs. 3 and 5.2). `length_components` splits :math:`X^L =
\sum_k Z^L_k` with the full network's attention and ReLU gates :math:`G^l
= 1\{X W_1 + b_1 > 0\}` held fixed, so the token-wise MLP maps :math:`Z_k`
to :math:`Z_k + (G^l \odot Z_k W_1) W_2` and its bias joins :math:`Z_0`;
`restricted_outputs` gives :math:`Y_{\le k} = \sum_{j \le k} Z^L_j`. Dong
et al.'s code instead runs a few single paths, each with attention
recomputed on its own input; here every path is summed, exactly. LayerNorm
does not decompose and is refused.

References:
  Dong, Cordonnier, Loukas, Attention is Not All You Need: Pure Attention
  Loses Rank Doubly Exponentially with Depth, ICML 2021, arXiv:2103.03404.
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.theory import _checks
from qkspec.theory import san
from qkspec.theory import san_paths


def _layer_components(params_l, x_Txd, z_KxTxd, arch, temperature):
  r"""One skip layer on the full input `x_Txd` and its length components.

  P and G come from `x_Txd`, which `z_KxTxd` sums to (module docstring).
  Returns (x_next [T, d], z_next [K, T, d]), z_next summing to x_next.
  """
  h_Txd, _, probs_HxTxT = san.self_attention(x_Txd, params_l["w_qk"],
                                             params_l["w_v"], temperature)
  x_Txd = x_Txd + h_Txd
  z_KxTxd = san_paths.attention_layer_paths(z_KxTxd, probs_HxTxT,
                                            params_l["w_v"])
  if arch.mlp:
    pre_TxF = x_Txd @ params_l["w1"] + params_l["b1"][None, :]
    gate_TxF = (pre_TxF > 0).astype(x_Txd.dtype)      # G, fixed from X
    x_Txd = x_Txd + jax.nn.relu(pre_TxF) @ params_l["w2"] + (
        params_l["b2"][None, :])
    lin_KxTxd = jnp.einsum("tf,ktf,fe->kte", gate_TxF,
                           jnp.einsum("ktd,df->ktf", z_KxTxd, params_l["w1"]),
                           params_l["w2"])
    bias_Txd = (gate_TxF * params_l["b1"][None, :]) @ params_l["w2"] + (
        params_l["b2"][None, :])
    z_KxTxd = (z_KxTxd + lin_KxTxd).at[0].add(bias_Txd)
  return x_Txd, z_KxTxd


def length_components(params: dict[str, jax.Array], x_Txd: jax.Array,
                      arch: san.Architecture = san.Architecture(skip=True),
                      temperature: float | None = None) -> jax.Array:
  r""":math:`Z^L_k`, k = 0..L, [K, T, d]: the output of one sequence split by
  path length; `z.sum(0)` is `san.forward(...)["outputs"][-1]`."""
  if not arch.skip or arch.layernorm:
    raise ValueError(f"path decomposition needs skip connections and no "
                     f"LayerNorm, got {arch}.")
  _checks.min_ndim("x", x_Txd, 2, "[T, d]")
  L = params["w_qk"].shape[0]
  z = jnp.zeros((L + 1,) + x_Txd.shape, x_Txd.dtype).at[0].set(x_Txd)

  def body(carry, params_l):
    return _layer_components(params_l, *carry, arch, temperature), None

  (_, z), _ = jax.lax.scan(body, (x_Txd, z), params)
  return z


def restricted_outputs(params: dict[str, jax.Array], x_Txd: jax.Array,
                       arch: san.Architecture = san.Architecture(skip=True),
                       temperature: float | None = None) -> jax.Array:
  r""":math:`Y_{\le k} = \sum_{j \le k} Z^L_j` for k = 0..L: [K, T, d]."""
  return jnp.cumsum(length_components(params, x_Txd, arch, temperature),
                    axis=0)


def without_layer_attention(params: dict[str, jax.Array], layer: int
                            ) -> dict[str, jax.Array]:
  r"""`params` with layer `layer`'s value matrices zeroed: in a skip SAN,
  every path through that layer's attention removed."""
  return {**params, "w_v": params["w_v"].at[layer].set(0.0)}
