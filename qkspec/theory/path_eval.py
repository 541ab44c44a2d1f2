r"""A skip SAN (with or without MLPs) evaluated on its paths of length <= k.

Shapes: L = layers, H = heads, T = tokens, d = token dimension, F = MLP
width, K = L + 1 path lengths.

In a skip SAN each layer either skips (the identity "head") or goes through
one of its H heads; a path's length is the number of attention layers it
goes through (Dong et al. 2021, Secs. 3 and 5.2).
`san_paths.path_length_components` sums the paths of each length without
MLPs, with the full network's attention :math:`P^l_h`:

.. math:: Z^{l+1}_k = Z^l_k + \sum_h P^l_h Z^l_{k-1} W^l_h,
          \qquad Z^0_0 = X,\quad \sum_k Z^L_k = X^L.

`length_components` adds ReLU MLPs, :math:`X \leftarrow X + \mathrm{MLP}(X)`,
holding the full network's gates :math:`G^l = 1\{X W_1 + b_1 > 0\}` fixed
as the attention is:

.. math:: \mathrm{MLP}(X) = (G^l \odot (X W_1 + b_1)) W_2 + b_2
          = \sum_k (G^l \odot Z_k W_1) W_2
            + \big[(G^l \odot \mathbf 1 b_1^\top) W_2 + \mathbf 1 b_2^\top\big],

so the MLP maps :math:`Z_k` to :math:`Z_k + (G^l \odot Z_k W_1) W_2` (it is
token-wise: no attention layer added) and its bias term joins the length-0
component. The decomposition stays exact, :math:`\sum_{k \le L} Z^L_k = X^L`
(without MLPs it is `path_length_components`; tests/dong_trained_test.py).
`restricted_outputs` gives :math:`Y_{\le k} = \sum_{j \le k} Z^L_j`, so
:math:`Y_{\le L} = X^L` and, without MLPs, :math:`Y_{\le 0} = X`.

Departure from Dong et al.'s released code, which runs a random handful of
single paths of one length, each with attention recomputed on its own
input: here every path of every length is summed with the full network's
attention and gates, exact and deterministic. LayerNorm does not decompose
this way and is refused.

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


def check_decomposable(arch: san.Architecture) -> None:
  """Raises ValueError unless `arch` has skips and no LayerNorm."""
  if not arch.skip or arch.layernorm:
    raise ValueError(f"path decomposition needs skip connections and no "
                     f"LayerNorm, got {arch}.")


def layer_components(params_l: dict[str, jax.Array], x_Txd: jax.Array,
                     z_KxTxd: jax.Array, arch: san.Architecture,
                     temperature: float | None = None
                     ) -> tuple[jax.Array, jax.Array]:
  r"""One skip layer applied to the full input and to its length components.

  Attention: :math:`Z_k \leftarrow Z_k + \sum_h P_h Z_{k-1} W_h`; MLP
  (if `arch.mlp`): :math:`Z_k \leftarrow Z_k + (G \odot Z_k W_1) W_2`, plus
  the bias term on :math:`Z_0`, with P and G from the full input
  :math:`X^l` = `x_Txd`, which `z_KxTxd` sums to.

  Returns:
    (x_next [T, d], z_next [K, T, d]), z_next summing to x_next.
  """
  check_decomposable(arch)
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
  r"""The output :math:`X^L` split by path length, :math:`Z^L_k`, k = 0..L.

  Returns z_KxTxd, K = L + 1, of one sequence :math:`X^0`; `z.sum(0)` is
  `san.forward(...)["outputs"][-1]`.
  """
  check_decomposable(arch)
  _checks.min_ndim("x", x_Txd, 2, "[T, d]")
  L = params["w_qk"].shape[0]
  z = jnp.zeros((L + 1,) + x_Txd.shape, x_Txd.dtype).at[0].set(x_Txd)

  def body(carry, params_l):
    return layer_components(params_l, *carry, arch, temperature), None

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
  r"""`params` with layer `layer`'s value matrices zeroed.

  In a skip SAN this removes every path through that layer's attention
  while the other layers recompute theirs on the new inputs.
  """
  return {**params, "w_v": params["w_v"].at[layer].set(0.0)}
