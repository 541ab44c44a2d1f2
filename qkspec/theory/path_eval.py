r"""A skip SAN (with or without MLPs) evaluated on its paths of length <= k.

Shapes: L = layers, H = heads, T = tokens, d = token dimension, F = MLP
width, K = L + 1 path lengths. Tokens are rows (DESIGN.md Sec. 2).

Dong et al. (2021, Sec. 3 and 5.2) view a SAN with skip connections as an
ensemble of paths: each layer either skips (the identity "head") or goes
through one of its H heads, and the length of a path is the number of
attention layers it goes through. `san_paths.path_length_components` sums
the paths of each length for the skip SAN without MLPs:

.. math:: Z^{l+1}_k = Z^l_k + \sum_h P^l_h Z^l_{k-1} W^l_h,
          \qquad Z^0_0 = X,\quad \sum_k Z^L_k = X^L,

with the attention matrices :math:`P^l_h` of the full network.
`length_components` extends it to layers with a ReLU MLP,
:math:`X \leftarrow X + \mathrm{MLP}(X)`, by holding the ReLU gates of the
full network fixed, as the attention matrices are: with
:math:`G^l = 1\{X W_1 + b_1 > 0\}` (the full network's gate at layer l),

.. math:: \mathrm{MLP}(X) = (G^l \odot (X W_1 + b_1)) W_2 + b_2
          = \sum_k (G^l \odot Z_k W_1) W_2
            + \big[(G^l \odot \mathbf 1 b_1^\top) W_2 + \mathbf 1 b_2^\top\big],

so the MLP maps the length-k component to
:math:`Z_k + (G^l \odot Z_k W_1) W_2` (an MLP is token-wise, it adds no
attention layer to a path) and its bias term, which goes through no
attention, joins the length-0 component. The decomposition stays exact,
:math:`\sum_{k \le L} Z^L_k = X^L`; for the MLP-free SAN it is
`path_length_components` itself (tests/dong_trained_test.py).

`restricted_outputs` returns the network restricted to the paths of length
<= k for every k: :math:`Y_{\le k} = \sum_{j \le k} Z^L_j`, so
:math:`Y_{\le L} = X^L` (the full network) and, without MLPs,
:math:`Y_{\le 0} = X` (the identity path).

Departure from Dong et al.'s released code: it evaluates a random handful of
individual paths of one length, each run with the attention recomputed on
that path's own input; here every path of every length is summed, with the
full network's attention (and gates), which makes the decomposition exact
and deterministic. LayerNorm is not decomposable this way and is refused.

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
  the bias term on :math:`Z_0` (module docstring), with P and G computed from
  the full input `x_Txd`.

  Args:
    params_l: one layer of `san.init_params` (no leading L axis).
    x_Txd: the full network's input to this layer, :math:`X^l`.
    z_KxTxd: its path-length components, summing to `x_Txd`.
    arch: skip (required), optional MLP, no LayerNorm.
    temperature: :math:`\lambda`; None means :math:`\sqrt d`.

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

  Args:
    params: from `san.init_params` (stacked over L layers).
    x_Txd: the network input :math:`X^0` (one sequence).
    arch: skip connections (required), with or without MLPs, no LayerNorm.
    temperature: :math:`\lambda`; None means :math:`\sqrt d`.

  Returns:
    z_KxTxd, K = L + 1; `z.sum(0)` is `san.forward(...)["outputs"][-1]`.
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
  r""":math:`Y_{\le k} = \sum_{j \le k} Z^L_j` for k = 0..L: [K, T, d].

  Row L is the full network's output :math:`X^L`; without MLPs row 0 is the
  identity path :math:`X^0`.
  """
  return jnp.cumsum(length_components(params, x_Txd, arch, temperature),
                    axis=0)


def without_layer_attention(params: dict[str, jax.Array], layer: int
                            ) -> dict[str, jax.Array]:
  r"""`params` with layer `layer`'s value matrices zeroed.

  In a skip SAN this removes every path through that layer's attention
  (:math:`X + \mathrm{SA}(X)` becomes X there) while the other layers
  recompute their attention on the new inputs.
  """
  return {**params, "w_v": params["w_v"].at[layer].set(0.0)}
