r"""A token-classification SAN (Dong et al.'s task models) as a Flax module.

Shapes: B = batch, T = tokens, d = width, H = heads, F = MLP width,
V = vocabulary (= classes), L = layers.

.. math:: X^0 = E[x] + P,\qquad X^L = \mathrm{SAN}(X^0),\qquad
          \mathrm{logits} = X^L W_{out} + b_{out},

with learned embedding E [V, d] and positions P [T, d], and the layers of
`qkspec.theory.san.layer` (joint :math:`W_{QK,h}`, value with the output
projection folded in, optional skip and MLP, no LayerNorm). `san_params`,
`embed` and `readout` read the parameters back for `qkspec.theory`
(tests/training/san_model_test.py). Each `decoder/block_<l>` holds
`attn/{w_qk, w_v}` [H, d, d] and `mlp/{w1, b1, w2, b2}`, and sows
`attn/logits`, `attn/probs` [B, H, T, T] and `out` [B, T, d].
"""
# pylint: disable=invalid-name
import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from qkspec.theory import san


@dataclasses.dataclass(frozen=True, kw_only=True)
class SANConfig:
  """The settings of the classifier and its blocks (`make_classifier`)."""
  vocab_size: int          # V tokens = classes
  seq_len: int             # T, the learned positions
  d_model: int             # d
  num_layers: int          # L
  num_heads: int           # H
  temperature: float       # lambda
  skip: bool               # X + SA(X) instead of SA(X)
  mlp: bool                # an MLP after each attention
  mlp_dim: int             # F
  mlp_gain: float = 1.0    # `SANMLP.out_gain`


class SANAttention(nn.Module):
  r"""One layer's :math:`\mathrm{SA}(X) = \sum_h P_h X W_h`
  (`san.self_attention`)."""
  num_heads: int
  temperature: float

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array) -> jax.Array:
    d = x_BxTxd.shape[-1]
    H = self.num_heads
    D = max(d // H, 1)
    # W_QK = W_Q^T W_K and W_V W_O with fan-in Gaussian factors, as san's
    # "gaussian" inits: std of an entry of W_QK is sqrt(D) / d.
    w_qk = self.param("w_qk", _gaussian_product(D, d, d), (H, d, d))
    w_v = self.param("w_v", _gaussian_product(D, d, H * D), (H, d, d))
    out, logits, probs = jax.vmap(
        lambda x: san.self_attention(x, w_qk, w_v, self.temperature))(x_BxTxd)
    self.sow("intermediates", "logits", logits)
    self.sow("intermediates", "probs", probs)
    return out


def _gaussian_product(inner: int, fan_left: int, fan_right: int):
  r"""Init of :math:`A^\top B` per head, A, B [inner, d] ~ N(0, 1/fan), as
  `san.init_params`' "gaussian" W_QK and value :math:`W_V W_O`."""
  def init(key, shape, dtype=jnp.float32):
    H, d, _ = shape
    k_a, k_b = jax.random.split(key)
    a = jax.random.normal(k_a, (H, inner, d)) / math.sqrt(fan_left)
    b = jax.random.normal(k_b, (H, inner, d)) / math.sqrt(fan_right)
    return jnp.einsum("hed,hef->hdf", a, b).astype(dtype)
  return init


class SANMLP(nn.Module):
  r""":math:`\mathrm{relu}(X W_1 + b_1) W_2 + b_2` (`san.mlp`).

  :math:`W_1` ~ N(0, 2/d), :math:`W_2` ~ N(0, g^2/F), g = `out_gain`:
  `make_classifier` passes GPT-2's :math:`1/\sqrt{2L}`, without which the
  token variance doubles per layer and the softmax saturates.
  """
  mlp_dim: int
  out_gain: float = 1.0

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array) -> jax.Array:
    d, F = x_BxTxd.shape[-1], self.mlp_dim
    w1 = self.param("w1", nn.initializers.normal(math.sqrt(2.0 / d)), (d, F))
    b1 = self.param("b1", nn.initializers.zeros, (F,))
    w2 = self.param("w2", nn.initializers.normal(self.out_gain / math.sqrt(F)),
                    (F, d))
    b2 = self.param("b2", nn.initializers.zeros, (d,))
    return jax.vmap(lambda x: san.mlp(x, w1, b1, w2, b2))(x_BxTxd)


class SANBlock(nn.Module):
  """`san.layer` without LayerNorm: X + SA(X) (or SA(X)), then the MLP."""
  config: SANConfig

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array) -> jax.Array:
    c = self.config
    h = SANAttention(c.num_heads, c.temperature, name="attn")(x_BxTxd)
    x_BxTxd = x_BxTxd + h if c.skip else h
    if c.mlp:
      h = SANMLP(c.mlp_dim, c.mlp_gain, name="mlp")(x_BxTxd)
      x_BxTxd = x_BxTxd + h if c.skip else h
    self.sow("intermediates", "out", x_BxTxd)
    return x_BxTxd


class SANDecoder(nn.Module):
  config: SANConfig

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array) -> jax.Array:
    for layer in range(self.config.num_layers):
      x_BxTxd = SANBlock(self.config, name=f"block_{layer}")(x_BxTxd)
    return x_BxTxd


class SANClassifier(nn.Module):
  """Tokens [B, T] -> per-position class logits [B, T, V] (module docstring)."""
  config: SANConfig

  @nn.compact
  def __call__(self, tokens_BxT: jax.Array, deterministic: bool = True):
    del deterministic   # no dropout
    c = self.config
    d, V = c.d_model, c.vocab_size
    emb = self.param("embed", nn.initializers.normal(1.0), (V, d))
    pos = self.param("pos", nn.initializers.normal(1.0), (c.seq_len, d))
    x_BxTxd = emb[tokens_BxT] + pos[None, :tokens_BxT.shape[-1]]
    x_BxTxd = SANDecoder(c, name="decoder")(x_BxTxd)
    return nn.Dense(V, kernel_init=nn.initializers.normal(d**-0.5),
                    name="output")(x_BxTxd)


def make_classifier(model_config, vocab_size: int, seq_len: int,
                    temperature: float) -> SANClassifier:
  """The module of `config.model` (num_layers, d_model, num_heads, ffn_dim,
  skip, mlp) for V = `vocab_size` classes and T = `seq_len`."""
  m = model_config
  return SANClassifier(SANConfig(
      vocab_size=vocab_size, seq_len=seq_len, d_model=m.d_model,
      num_layers=m.num_layers, num_heads=m.num_heads, temperature=temperature,
      skip=m.skip, mlp=m.mlp, mlp_dim=m.ffn_dim,
      mlp_gain=1.0 / math.sqrt(2 * m.num_layers)))


# ------------------------------------- the same parameters as pure arrays ----

def architecture(model_config) -> san.Architecture:
  """The `san.Architecture` the module computes (never LayerNorm)."""
  return san.Architecture(skip=model_config.skip, mlp=model_config.mlp)


def san_params(params, mlp_dim: int | None = None) -> dict[str, jax.Array]:
  """`params["decoder"]` as `san.init_params`' stacked dict (without an
  MLP, zero MLP weights of width `mlp_dim`, which `san.layer` ignores)."""
  decoder = params["decoder"]
  L = len(decoder)
  blocks = [decoder[f"block_{l}"] for l in range(L)]
  out = {"w_qk": jnp.stack([b["attn"]["w_qk"] for b in blocks]),
         "w_v": jnp.stack([b["attn"]["w_v"] for b in blocks])}
  if "mlp" in blocks[0]:
    for name in ("w1", "b1", "w2", "b2"):
      out[name] = jnp.stack([b["mlp"][name] for b in blocks])
  else:
    d, F = out["w_qk"].shape[-1], mlp_dim or 1
    out.update(w1=jnp.zeros((L, d, F)), b1=jnp.zeros((L, F)),
               w2=jnp.zeros((L, F, d)), b2=jnp.zeros((L, d)))
  return out


def embed(params, tokens_BxT: jax.Array) -> jax.Array:
  """:math:`X^0 = E[x] + P` [B, T, d]."""
  T = tokens_BxT.shape[-1]
  return params["embed"][tokens_BxT] + params["pos"][None, :T]


def readout(params, x_Bx___xd: jax.Array) -> jax.Array:
  """Class logits of any [..., d] representation (the output Dense)."""
  bias_V = params["output"]["bias"]
  return x_Bx___xd @ params["output"]["kernel"] + bias_V.reshape(
      (1,) * (x_Bx___xd.ndim - 1) + bias_V.shape)
