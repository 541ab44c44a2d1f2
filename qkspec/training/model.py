r"""Flax modules: the theory model (paper Sec. 2) and the LM of Sec. 7 / App. D.

Shapes: B=batch, T=tokens, d=model width, H=heads, D=head width, F=FFN
width, V=vocab, L=layers. Tokens are rows (the paper stores them as columns).

Every module takes one `ModelConfig` (`config.model` typed by
`model_config`). Attention layers sow their logits and probabilities
("intermediates") for `layer_stats`; `qk_matrices` gives every
:math:`W_{QK}`. With `kernels="pallas"` attention, Post-LN and the loss run
as the fused kernels of `qkspec.kernels` on the same parameters and dropout
masks (measuring uses the XLA layers).
"""
# pylint: disable=invalid-name
import dataclasses
import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import kernels as kernels_lib
from qkspec.config import schema
from qkspec.theory import softmax
from qkspec.theory import spectrum

# sigma of each name of schema.ACTIVATIONS, in its order.
ACTIVATIONS = dict(zip(schema.ACTIVATIONS,
                       (nn.relu, lambda x: x, nn.gelu), strict=True))

# fairseq initialisations (fairseq/modules/multihead_attention.py,
# fairseq/models/transformer_lm.py): xavier_uniform everywhere, gain
# 1/sqrt(2) for q/k/v, embeddings N(0, d^-1/2).
_xavier = nn.initializers.xavier_uniform()
_xavier_qkv = nn.initializers.variance_scaling(0.5, "fan_avg", "uniform")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelConfig:
  """The settings of every module here, as lm1b's `TransformerConfig`."""
  num_layers: int = 1                  # L
  d_model: int | None = None           # d (the LM's embedding width)
  num_heads: int = 1                   # H
  head_dim: int | None = None          # D; None means d // H
  qk_param: str = "factored"           # schema.QK_PARAMS
  qkv_bias: bool = True                # q/k/v(/out) biases, as fairseq
  out_proj: bool = True                # False: concat heads (needs H*D == d)
  causal: bool = True
  temperature: float | None = None     # lambda; None means sqrt(D)
  attn_dropout: float = 0.0            # on the attention probabilities
  ffn_dim: int                         # F
  activation: str = "relu"             # schema.ACTIVATIONS
  norm: str = "post"                   # schema.NORMS
  ffn_bias: bool = True
  dropout: float = 0.0                 # embedding and residual dropout
  kernels: str = "xla"                 # schema.KERNELS
  vocab_size: int | None = None        # V (the LM)
  dtype: Any = jnp.float32             # compute dtype (params stay float32)


class ProjectionParams(nn.Module):
  """`nn.DenseGeneral(features)`'s kernel [d, *features] and bias (same names,
  shapes, initial values), unapplied: the Pallas path's one QKV matmul."""
  features: tuple[int, ...]
  use_bias: bool = True

  @nn.compact
  def __call__(self, d: int):
    flat = (d, math.prod(self.features))
    kernel = self.param("kernel", lambda rng, shape: _xavier_qkv(
        rng, flat).reshape(shape), (d, *self.features))
    if not self.use_bias:
      return kernel, None
    return kernel, self.param("bias", nn.initializers.zeros_init(),
                              self.features)


def causal_mask(seq_len: int) -> jax.Array:
  """Bool [T, T], True where query t may see key j (j <= t)."""
  return jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))


class SelfAttention(nn.Module):
  r"""Multi-head self-attention with an inspectable :math:`W_{QK}` (Eq. 1-2).

  .. math:: \omega_{tj} = (x_t W_Q^\top + b_q)(x_j W_K^\top + b_k)^\top
            /\lambda,\qquad A = \mathrm{softmax}_j(\omega),\qquad
            U = A\,(X W_V^\top + b_v)

  per head, then the output projection. `qk_param="joint"`: logits
  :math:`x_t W_{QK} x_j^\top/\lambda` from one `w_qk` [H, d, d], as the
  paper's analysis. Sows `logits` (before masking) and `probs`,
  [B, H, T, T] float32. `kernels="pallas"`: one QKV matmul and
  `qkspec.kernels.attention`, unless "intermediates" is collected.
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, deterministic: bool = True):
    c = self.config
    B, T, d = x_BxTxd.shape
    if c.kernels == "pallas" and (c.qk_param == "joint" or c.attn_dropout):
      raise ValueError("kernels='pallas' needs qk_param='factored' and "
                       "attn_dropout=0.")
    H = c.num_heads
    D = c.head_dim or d // H
    lam = float(softmax.temperature(c.temperature, D))
    measuring = self.is_mutable_collection("intermediates")
    if c.kernels == "pallas" and not measuring:
      qkv_BxTx3xHxD, biases = self._packed_qkv(x_BxTxd, H, D)
      return self._output(kernels_lib.attention(
          qkv_BxTx3xHxD, lam, biases=biases, causal=c.causal), d)
    dense = lambda name: nn.DenseGeneral(  # noqa: E731
        (H, D), use_bias=c.qkv_bias, dtype=c.dtype,
        kernel_init=_xavier_qkv, name=name)
    if c.qk_param == "joint":
      w_qk_Hxdxd = self.param(
          "w_qk", nn.initializers.normal(0.5 / math.sqrt(d)), (H, d, d))
      # 0.5/sqrt(d): the std of W_Q^T W_K for two fairseq-initialised kernels.
      xw_BxTxHxd = jnp.einsum("bti,hij->bthj", x_BxTxd,
                              w_qk_Hxdxd.astype(c.dtype))
      logits_BxHxTxT = jnp.einsum("bqhj,bkj->bhqk", xw_BxTxHxd, x_BxTxd)
    else:
      q_BxTxHxD = dense("query")(x_BxTxd)
      k_BxTxHxD = dense("key")(x_BxTxd)
      logits_BxHxTxT = jnp.einsum("bqhd,bkhd->bhqk", q_BxTxHxD, k_BxTxHxD)
    v_BxTxHxD = dense("value")(x_BxTxd)
    logits_BxHxTxT = logits_BxHxTxT.astype(jnp.float32) / lam
    self.sow("intermediates", "logits", logits_BxHxTxT)
    masked = (jnp.where(causal_mask(T), logits_BxHxTxT,
                        jnp.finfo(jnp.float32).min) if c.causal
              else logits_BxHxTxT)
    probs_BxHxTxT = jax.nn.softmax(masked, axis=-1)
    self.sow("intermediates", "probs", probs_BxHxTxT)
    probs_BxHxTxT = nn.Dropout(c.attn_dropout)(
        probs_BxHxTxT, deterministic=deterministic)
    u_BxTxHxD = jnp.einsum("bhqk,bkhd->bqhd", probs_BxHxTxT.astype(c.dtype),
                           v_BxTxHxD)
    return self._output(u_BxTxHxD, d)

  def _packed_qkv(self, x_BxTxd: jax.Array, H: int, D: int):
    """q, k, v by one matmul, [B, T, 3, H, D] without biases, and the
    biases (three [H, D], or None)."""
    B, T, d = x_BxTxd.shape
    c = self.config
    ws, biases = zip(*(ProjectionParams((H, D), c.qkv_bias, name=name)(d)
                       for name in ("query", "key", "value")))
    w_dx3HD = jnp.concatenate([w.reshape(d, H * D) for w in ws],
                              axis=1).astype(c.dtype)
    qkv_BxTx3HD = jnp.einsum("btd,de->bte", x_BxTxd.astype(c.dtype),
                             w_dx3HD)
    return (qkv_BxTx3HD.reshape(B, T, 3, H, D),
            biases if c.qkv_bias else None)

  def _output(self, u_BxTxHxD: jax.Array, d: int) -> jax.Array:
    """U [B, T, d]: the output projection, or the heads side by side (H D =
    d, as the schema requires)."""
    if self.config.out_proj:
      return nn.DenseGeneral(d, axis=(-2, -1), use_bias=self.config.qkv_bias,
                             dtype=self.config.dtype, kernel_init=_xavier,
                             name="out")(u_BxTxHxD)
    return u_BxTxHxD.reshape(*u_BxTxHxD.shape[:2], d)


class PostLN(nn.Module):
  """LayerNorm(x + dropout(u)) as one kernel (`qkspec.kernels.post_ln`),
  with `nn.LayerNorm`'s parameters; `mask`: `nn.Dropout`'s mask."""
  epsilon: float = 1e-5
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BxTxd, u_BxTxd, mask_BxTxd):
    d = x_BxTxd.shape[-1]
    scale = self.param("scale", nn.initializers.ones_init(), (d,))
    bias = self.param("bias", nn.initializers.zeros_init(), (d,))
    return kernels_lib.post_ln(x_BxTxd.astype(self.dtype),
                               u_BxTxd.astype(self.dtype), mask_BxTxd,
                               scale, bias, eps=self.epsilon)


class Block(nn.Module):
  r"""One transformer block (paper Sec. 2), Post-LN, Pre-LN or no LN.

  .. math:: Z = U(X) + X,\qquad X' = W_{F_2}\sigma(W_{F_1} Z) + Z

  Post-LN normalises Z and X', Pre-LN the inputs of U and of the FFN.
  Dropout after the attention and the FFN (fairseq); `kernels="pallas"`
  fuses each Post-LN residual (`PostLN`). Sows `out` [B, T, d].
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, deterministic: bool = True):
    c = self.config
    d = x_BxTxd.shape[-1]
    drop = nn.Dropout(c.dropout)
    fused = c.kernels == "pallas" and c.norm == "post"

    def residual(name, x, u):
      """x + dropout(u), layer-normed under Post-LN."""
      if fused:    # the mask nn.Dropout draws, scaled by 1/keep
        mask = drop(jnp.ones(u.shape, jnp.float32), deterministic)
        return PostLN(dtype=c.dtype, name=name)(x, u, mask)
      z = x + drop(u, deterministic=deterministic)
      return self._ln(name)(z) if c.norm == "post" else z

    h = self._ln("attn_ln")(x_BxTxd) if c.norm == "pre" else x_BxTxd
    u = SelfAttention(c, name="attn")(h, deterministic)
    z_BxTxd = residual("attn_ln", x_BxTxd, u)
    h = self._ln("ffn_ln")(z_BxTxd) if c.norm == "pre" else z_BxTxd
    h_BxTxF = nn.Dense(c.ffn_dim, use_bias=c.ffn_bias, dtype=c.dtype,
                       kernel_init=_xavier, name="ffn1")(h)
    h_BxTxF = ACTIVATIONS[c.activation](h_BxTxF)
    h = nn.Dense(d, use_bias=c.ffn_bias, dtype=c.dtype,
                 kernel_init=_xavier, name="ffn2")(h_BxTxF)
    x_BxTxd = residual("ffn_ln", z_BxTxd, h)
    self.sow("intermediates", "out", x_BxTxd)
    return x_BxTxd

  def _ln(self, name: str) -> nn.Module:
    return nn.LayerNorm(epsilon=1e-5, dtype=self.config.dtype, name=name)


class Decoder(nn.Module):
  """L blocks, plus a final LayerNorm for Pre-LN (fairseq's decoder)."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, deterministic: bool = True):
    c = self.config
    for layer in range(c.num_layers):
      x_BxTxd = Block(c, name=f"block_{layer}")(x_BxTxd, deterministic)
    if c.norm == "pre":
      x_BxTxd = nn.LayerNorm(epsilon=1e-5, dtype=c.dtype,
                             name="final_ln")(x_BxTxd)
    return x_BxTxd


class TheoryModel(nn.Module):
  r"""Sec. 2's model: no embedding, :math:`F(X) = X^L` [B, T, d]; its last
  row :math:`F(X)_T` predicts :math:`x_{T+1}`."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, deterministic: bool = True):
    return Decoder(self.config, name="decoder")(
        x_BxTxd.astype(self.config.dtype), deterministic).astype(jnp.float32)


def sinusoidal_positions(seq_len: int, d: int, offset: int = 2) -> np.ndarray:
  """fairseq's SinusoidalPositionalEmbedding [T, d], [sin | cos], from
  position padding_idx + 1 = 2."""
  half = d // 2
  freq = np.exp(np.arange(half) * -(math.log(10000.0) / max(half - 1, 1)))
  pos = np.arange(offset, offset + seq_len)[:, None] * freq[None, :]
  emb = np.concatenate([np.sin(pos), np.cos(pos)], axis=1)
  if d % 2:
    emb = np.concatenate([emb, np.zeros((seq_len, 1))], axis=1)
  return emb.astype(np.float32)


class OutputHead(nn.Module):
  """Untied output projection (no bias, as fairseq): the logits, or with
  targets (weighted loss sum, weight) by `qkspec.kernels.output_xent`,
  which never materialises the [B, T, V] logits."""
  config: ModelConfig

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, targets_BxT: jax.Array | None = None,
               weights_BxT: jax.Array | None = None):
    c = self.config
    d = x_BxTxd.shape[-1]
    kernel_dxV = self.param("kernel", nn.initializers.normal(d**-0.5),
                            (d, c.vocab_size))
    if targets_BxT is None:
      logits_BxTxV = jnp.einsum("btd,dv->btv", x_BxTxd.astype(c.dtype),
                                kernel_dxV.astype(c.dtype),
                                preferred_element_type=jnp.float32)
      return logits_BxTxV.astype(jnp.float32)
    if weights_BxT is None:
      weights_BxT = jnp.ones(targets_BxT.shape, jnp.float32)
    loss_sum = kernels_lib.output_xent(
        x_BxTxd.reshape(-1, d), kernel_dxV, targets_BxT.reshape(-1),
        weights_BxT.reshape(-1).astype(jnp.float32), impl=c.kernels,
        compute_dtype=c.dtype)
    return loss_sum, jnp.sum(weights_BxT)


class LanguageModel(nn.Module):
  r"""fairseq `transformer_lm` (Sec. 7, App. D): embedding times
  :math:`\sqrt d`, sinusoidal positions, dropout, L causal blocks and
  `OutputHead`, tokens [B, T] -> logits."""
  config: ModelConfig

  @nn.compact
  def __call__(self, tokens_BxT: jax.Array, deterministic: bool = True,
               targets_BxT: jax.Array | None = None,
               weights_BxT: jax.Array | None = None):
    c = self.config
    d = c.d_model
    embed = nn.Embed(c.vocab_size, d,
                     embedding_init=nn.initializers.normal(d**-0.5),
                     name="embed")
    x_BxTxd = embed(tokens_BxT) * math.sqrt(d)
    x_BxTxd = x_BxTxd + sinusoidal_positions(tokens_BxT.shape[-1], d)[None]
    x_BxTxd = nn.Dropout(c.dropout)(x_BxTxd, deterministic=deterministic)
    x_BxTxd = Decoder(c, name="decoder")(x_BxTxd.astype(c.dtype),
                                         deterministic)
    return OutputHead(c, name="output")(x_BxTxd, targets_BxT, weights_BxT)


def attention_temperature(model_config) -> float:
  r"""Every attention layer's :math:`\lambda`: `model_config.temperature`,
  None meaning :math:`\sqrt{d/H}`."""
  m = model_config
  return float(softmax.temperature(m.temperature, m.d_model // m.num_heads))


def model_config(config_model, vocab_size: int | None = None,
                 dtype: Any = jnp.float32) -> ModelConfig:
  """`config.model` (a training config's) as a `ModelConfig`, with its
  head width and temperature worked out."""
  m = config_model
  return ModelConfig(
      num_layers=m.num_layers, d_model=m.d_model, num_heads=m.num_heads,
      head_dim=m.d_model // m.num_heads, qk_param=m.qk_param,
      qkv_bias=m.qkv_bias, out_proj=m.out_proj, causal=m.causal,
      temperature=attention_temperature(m), attn_dropout=m.attn_dropout,
      ffn_dim=m.ffn_dim, activation=m.activation, norm=m.norm,
      ffn_bias=m.ffn_bias, dropout=m.dropout, kernels=m.kernels,
      vocab_size=vocab_size, dtype=dtype)


def make_model(config_model, task: str, vocab_size: int | None = None,
               dtype: Any = jnp.float32) -> nn.Module:
  """The module of `task` ("theory" or "lm") for `config.model`."""
  c = model_config(config_model, vocab_size, dtype)
  return TheoryModel(c) if task == "theory" else LanguageModel(c)


def attention_params(params) -> list[dict]:
  """The `attn` parameter dicts of every block, ordered by layer."""
  decoder = params["decoder"]
  num_layers = sum(name.startswith("block_") for name in decoder)
  return [decoder[f"block_{l}"]["attn"] for l in range(num_layers)]


def qk_matrices(params) -> jax.Array:
  r""":math:`W_{QK} = W_Q^\top W_K` of every layer and head, [L, H, d, d].

  Unscaled (the logits divide by :math:`\lambda`), as LocATER and Fig. 6B
  use them; a params tree with leading (sweep) axes needs `jax.vmap`.
  """
  attns = attention_params(params)
  if "w_qk" in attns[0]:        # qk_param="joint"
    return jnp.stack([attn["w_qk"] for attn in attns])
  stacked = lambda name: jnp.stack([a[name]["kernel"] for a in attns])  # noqa: E731
  return jax.vmap(spectrum.qk_from_kernels)(stacked("query"), stacked("key"))
