r"""Pure self-attention networks (SANs) of Dong et al. (2021) as pure functions.

Shapes: L = layers, H = heads, T = tokens (rows), d = token dimension,
F = MLP width, N = sequences.

One layer is Dong et al.'s multi-head self-attention with the output
projection folded into each head's value matrix (their Sec. 2.1):

.. math:: \mathrm{SA}(X) = \sum_{h=1}^H P_h X W_h, \qquad
          P_h = \mathrm{softmax}(X W_{QK,h} X^\top / \lambda),

optionally with a skip, a ReLU MLP and an affine-free Post-LN
(`Architecture`). Parameters are stacked over layers: `lax.scan` runs the
depth, `vmap` maps weight draws.

References:
  Dong, Cordonnier, Loukas, Attention is Not All You Need: Pure Attention
  Loses Rank Doubly Exponentially with Depth, ICML 2021, arXiv:2103.03404.
"""
# pylint: disable=invalid-name
import dataclasses

import jax
import jax.numpy as jnp

from qkspec.theory import _checks
from qkspec.theory import randomwalk
from qkspec.theory import softmax
from qkspec.theory import spectrum

QK_INITS = ("gaussian", "spectrum")
VALUE_INITS = ("gaussian", "orthogonal", "identity")
INPUTS = ("random_walk", "gaussian")


@dataclasses.dataclass(frozen=True)
class Architecture:
  """Which pieces a SAN layer has (static under `jit`)."""
  skip: bool = False       # X + SA(X) instead of SA(X) (and X + MLP(X))
  mlp: bool = False        # a ReLU MLP after the attention
  layernorm: bool = False  # affine-free Post-LN after each sub-block


# The five architectures of the rank-collapse experiment (cf. Dong Fig. 1).
ARCHITECTURES = {
    "san": Architecture(),
    "san_skip": Architecture(skip=True),
    "san_mlp": Architecture(mlp=True),
    "san_ln": Architecture(layernorm=True),
    "block": Architecture(skip=True, mlp=True, layernorm=True),
}


def init_params(key: jax.Array, *, num_layers: int, num_heads: int, dim: int,
                head_dim: int | None = None, mlp_dim: int | None = None,
                qk_init: str = "gaussian", qk_gain: float | jax.Array = 1.0,
                eigen_mean: float | jax.Array = 0.0,
                eigen_std: float | jax.Array = 1.0,
                value_init: str = "gaussian",
                value_gain: float | jax.Array = 1.0) -> dict[str, jax.Array]:
  r"""Random SAN weights, stacked over layers.

  `qk_init` "gaussian": :math:`W_{QK} = g^2 W_Q^\top W_K`, :math:`W_Q, W_K`
  [D, d] i.i.d. N(0, 1/d), g = `qk_gain`; "spectrum": `spectrum.sample_qk`
  (eigen_mean, eigen_std) (Fig. 5; both may be traced). `value_init`
  "gaussian": :math:`W_h = g\,W_{V,h}W_{O,h}`, entries N(0, 1/d) and
  N(0, 1/(HD)), g = `value_gain`; "orthogonal": :math:`g\,O_h/\sqrt H`,
  Haar :math:`O_h`; "identity": :math:`g\,I/H`. The MLP (used only if the
  architecture has one) is He-initialised with zero biases. D = `head_dim`
  (None: max(d // H, 1)), F = `mlp_dim` (None: 4 d).

  Returns:
    dict with `w_qk` [L, H, d, d], `w_v` [L, H, d, d], `w1` [L, d, F],
    `b1` [L, F], `w2` [L, F, d], `b2` [L, d].
  """
  L, H, d = num_layers, num_heads, dim
  D = head_dim or max(d // H, 1)
  F = mlp_dim or 4 * d
  _checks.choice("qk_init", qk_init, QK_INITS)
  _checks.choice("value_init", value_init, VALUE_INITS)
  k_q, k_k, k_qk, k_v, k_o, k_1, k_2 = jax.random.split(key, 7)

  if qk_init == "gaussian":
    w_q_LxHxDxd = jax.random.normal(k_q, (L, H, D, d)) / jnp.sqrt(d)
    w_k_LxHxDxd = jax.random.normal(k_k, (L, H, D, d)) / jnp.sqrt(d)
    w_qk = qk_gain**2 * jnp.einsum("lhed,lhef->lhdf", w_q_LxHxDxd,
                                   w_k_LxHxDxd)   # W_Q^T W_K
  else:
    keys_LH = jax.random.split(k_qk, L * H)
    w_qk = jax.vmap(lambda k: spectrum.sample_qk(k, d, eigen_mean,
                                                 eigen_std))(keys_LH)
    w_qk = w_qk.reshape(L, H, d, d)

  if value_init == "gaussian":
    w_v_LxHxdxD = jax.random.normal(k_v, (L, H, d, D)) / jnp.sqrt(d)
    w_o_LxHxDxd = jax.random.normal(k_o, (L, H, D, d)) / jnp.sqrt(H * D)
    w_v = value_gain * jnp.einsum("lhde,lhef->lhdf", w_v_LxHxdxD, w_o_LxHxDxd)
  elif value_init == "orthogonal":
    keys_LH = jax.random.split(k_v, L * H)
    w_v = jax.vmap(lambda k: spectrum.haar_orthogonal(k, d))(keys_LH)
    w_v = value_gain * w_v.reshape(L, H, d, d) / jnp.sqrt(H)
  else:
    w_v = value_gain * jnp.broadcast_to(jnp.eye(d) / H, (L, H, d, d))

  return dict(
      w_qk=w_qk, w_v=w_v,
      w1=jax.random.normal(k_1, (L, d, F)) * jnp.sqrt(2.0 / d),
      b1=jnp.zeros((L, F)),
      w2=jax.random.normal(k_2, (L, F, d)) / jnp.sqrt(F),
      b2=jnp.zeros((L, d)),
  )


def self_attention(x_Txd: jax.Array, w_qk_Hxdxd: jax.Array,
                   w_v_Hxdxd: jax.Array, temperature: float | None = None
                   ) -> tuple[jax.Array, jax.Array, jax.Array]:
  r""":math:`\mathrm{SA}(X) = \sum_h P_h X W_h` (Dong et al., Sec. 2.1).

  Returns (out [T, d], logits [H, T, T], probs [H, T, T]), the logits
  :math:`\omega_{h,tj} = x_t^\top W_{QK,h} x_j/\lambda` (query t, key j).
  """
  lam = softmax.temperature(temperature, x_Txd.shape[-1])
  logits_HxTxT = jnp.einsum("td,hde,je->htj", x_Txd, w_qk_Hxdxd, x_Txd) / lam
  probs_HxTxT = jax.nn.softmax(logits_HxTxT, axis=-1)
  out_Txd = jnp.einsum("htj,jd,hde->te", probs_HxTxT, x_Txd, w_v_Hxdxd)
  return out_Txd, logits_HxTxT, probs_HxTxT


def layer_norm(x: jax.Array, eps: float = 1e-6) -> jax.Array:
  r"""Affine-free LayerNorm over features, :math:`(x - \bar x)/\sqrt{V[x] +
  \epsilon}`."""
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.var(x, axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + eps)


def mlp(x_Txd: jax.Array, w1_dxF: jax.Array, b1_F: jax.Array,
        w2_Fxd: jax.Array, b2_d: jax.Array) -> jax.Array:
  r"""Feed-forward block :math:`\mathrm{relu}(X W_1 + b_1) W_2 + b_2`."""
  return jax.nn.relu(x_Txd @ w1_dxF + b1_F[None, :]) @ w2_Fxd + b2_d[None, :]


def layer(params_l: dict[str, jax.Array], x_Txd: jax.Array,
          arch: Architecture, temperature: float | None = None
          ) -> tuple[jax.Array, jax.Array, jax.Array]:
  r"""One SAN layer (attention, then optionally the MLP), Post-LN order.

  `params_l`: one layer of `init_params`. Returns (x_out [T, d], logits,
  probs [H, T, T]).
  """
  h_Txd, logits, probs = self_attention(x_Txd, params_l["w_qk"],
                                        params_l["w_v"], temperature)
  x_Txd = x_Txd + h_Txd if arch.skip else h_Txd
  if arch.layernorm:
    x_Txd = layer_norm(x_Txd)
  if arch.mlp:
    h_Txd = mlp(x_Txd, params_l["w1"], params_l["b1"], params_l["w2"],
                params_l["b2"])
    x_Txd = x_Txd + h_Txd if arch.skip else h_Txd
    if arch.layernorm:
      x_Txd = layer_norm(x_Txd)
  return x_Txd, logits, probs


def forward(params: dict[str, jax.Array], x_Txd: jax.Array,
            arch: Architecture = Architecture(),
            temperature: float | None = None) -> dict[str, jax.Array]:
  r"""Runs the L layers on one sequence X^0 (`jax.vmap` it over sequences).

  Returns:
    dict with `outputs` [L+1, T, d] (X^0, ..., X^L), `logits` and `probs`
    [L, H, T, T] (layer l's attention, computed from X^l).
  """
  if jnp.ndim(x_Txd) != 2:
    raise ValueError(f"x must be one sequence [T, d] (vmap over sequences), "
                     f"got shape {jnp.shape(x_Txd)}.")
  _checks.square_matrix("params['w_qk']", params["w_qk"], x_Txd.shape[-1])

  def body(x, params_l):
    x_next, logits, probs = layer(params_l, x, arch, temperature)
    return x_next, (x_next, logits, probs)

  _, (xs_LxTxd, logits, probs) = jax.lax.scan(body, x_Txd, params)
  return dict(outputs=jnp.concatenate([x_Txd[None], xs_LxTxd], axis=0),
              logits=logits, probs=probs)


def sample_inputs(key: jax.Array, kind: str, num_sequences: int,
                  seq_len: int, dim: int) -> jax.Array:
  r"""Input tokens [N, T, d]: `kind` "random_walk" (Assumption 1,
  :math:`\Sigma = I`) or "gaussian" (i.i.d. N(0, 1))."""
  _checks.choice("kind", kind, INPUTS)
  if kind == "random_walk":
    return randomwalk.random_walk(key, num_sequences, seq_len, dim)
  return jax.random.normal(key, (num_sequences, seq_len, dim))
