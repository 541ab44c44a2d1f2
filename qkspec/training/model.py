r"""Flax modules: the theory model (paper Sec. 2) and the LM of Sec. 7 / App. D.

Shapes: B=batch, T=tokens, d=model width, H=heads, D=head width, F=FFN
width, V=vocab, L=layers. Tokens are rows (the paper stores them as columns).

The modules only wire parameters; the maths they feed lives in the pure core:
`qk_matrices` returns each layer/head's :math:`W_{QK} = W_Q^\top W_K` (from
the Flax kernels by `qk_from_kernels`), and every attention layer sows its
logits and probabilities (collection "intermediates") so that rho, entropy
and rank collapse are measured on the real model
(`qkspec.training.layer_stats`).
"""
# pylint: disable=invalid-name
import math
import re
from typing import Any
import warnings

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import schema
from qkspec.training import attention_kernel
from qkspec.training import ffn_kernel
from qkspec.training import fused_xent
from qkspec.training import norm_kernel
from qkspec.training import pallas_xent
from qkspec.training import proj_norm_kernel
from qkspec.training import qkv_attention_kernel

QK_PARAMS = schema.QK_PARAMS
ATTENTION_IMPLS = schema.ATTENTION_IMPLS
NORMS = schema.NORMS
# One function per name of schema.ACTIVATIONS (tests/model_test.py checks).
ACTIVATIONS = {"relu": nn.relu, "identity": lambda x: x, "gelu": nn.gelu}

# fairseq initialisations (fairseq/modules/multihead_attention.py,
# fairseq/models/transformer_lm.py): xavier_uniform everywhere, gain
# 1/sqrt(2) for q/k/v, embeddings N(0, d^-1/2).
_xavier = nn.initializers.xavier_uniform()
_xavier_qkv = nn.initializers.variance_scaling(0.5, "fan_avg", "uniform")


class ProjectionParams(nn.Module):
  """The kernel [*in_dims, *features] and bias [*features] of
  `nn.DenseGeneral(features)` over the input axes `in_dims` (`nn.Dense`'s
  for one of each), same names, shapes and initial values (the kernel
  drawn as [prod(in_dims), prod(features)], the fans DenseGeneral's
  initialiser sees), without applying them: for `SelfAttention(fused_qkv=
  True)`, which applies three at once, and for projections whose bias the
  fused Post-LN kernel adds (`Block(fused_norm=True)`)."""
  features: tuple[int, ...]
  use_bias: bool = True
  kernel_init: Any = _xavier_qkv

  @nn.compact
  def __call__(self, *in_dims: int):
    flat = (math.prod(in_dims), math.prod(self.features))
    kernel = self.param("kernel", lambda rng, shape: self.kernel_init(
        rng, flat).reshape(shape), (*in_dims, *self.features))
    if not self.use_bias:
      return kernel, None
    return kernel, self.param("bias", nn.initializers.zeros_init(),
                              self.features)


def causal_mask(seq_len: int) -> jax.Array:
  """Bool [T, T], True where query t may see key j (j <= t)."""
  return jnp.tril(jnp.ones((seq_len, seq_len), dtype=bool))


class SelfAttention(nn.Module):
  r"""Multi-head self-attention with an inspectable :math:`W_{QK}` (Eq. 1-2).

  .. math:: \omega_{tj} = (x_t W_Q^\top + b_q)(x_j W_K^\top + b_k)^\top/\lambda,
            \qquad A = \mathrm{softmax}_j(\omega),\qquad U = A\,(X W_V^\top + b_v)

  per head, :math:`\lambda` = `temperature`, None meaning :math:`\sqrt D`
  (`head_temperature`; `make_model` passes `attention_temperature`). With
  `qk_param="joint"` the logits are :math:`x_t W_{QK} x_j^\top/\lambda` from
  one parameter `w_qk` [H, d, d] (no q/k biases), as in the paper's analysis.

  With `fused_qkv` (factored) the three projections are one matmul with
  the kernels side by side, same parameters: on a GPU one kernel for their
  input gradient and one for their bias gradient instead of three each.
  With `fused_qkv_attention` too (one head, `impl="pallas"`, T <= 64) the
  projections are computed inside the attention's kernel, and their input
  gradient inside its backward (`qkv_attention_kernel`).

  With `defer_out_bias` it returns (U before the output projection's bias,
  that bias or None): `Block(fused_norm=True)` adds it in its kernel; with
  `defer_out_proj` too, (the heads' outputs [B, T, HD], the projection's
  kernel [HD, d], its bias or None): `Block(fused_out_proj=True)` applies
  both in its kernel.

  Sows `logits` (raw, before masking) and `probs` (after the mask), both
  [B, H, T, T] in float32. With `impl="pallas"` (factored, no attention
  dropout) the softmax and both matmuls are one fused kernel
  (`qkspec.training.attention_kernel`) whenever "intermediates" is not
  being collected; collecting it takes the XLA path, which computes what
  is sown. With `fused_qkv` too, a sequence of at most 64 tokens goes to
  `packed_attention`, which reads the QKV matmul's output unsliced and adds
  the q/k/v biases itself (one kernel each way).
  """
  num_heads: int = 1
  head_dim: int | None = None          # D; None means d // H
  qk_param: str = "factored"
  use_bias: bool = True                # q/k/v(/out) biases, as fairseq
  out_proj: bool = True                # False: concat heads (needs H*D == d)
  causal: bool = True
  temperature: float | None = None     # lambda; None means sqrt(D)
  attn_dropout: float = 0.0
  impl: str = "xla"                    # ATTENTION_IMPLS
  fused_qkv: bool = False              # one matmul for q, k, v (factored)
  defer_out_bias: bool = False         # return (U, out bias) unadded
  defer_out_proj: bool = False         # and the projection unapplied
  fused_qkv_attention: bool = False    # q, k, v inside the kernel (H = 1)
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, deterministic: bool = True):
    B, T, d = x_BxTxd.shape
    if self.impl not in ATTENTION_IMPLS:
      raise ValueError(f"attention impl must be one of {ATTENTION_IMPLS}, "
                       f"got {self.impl!r}.")
    if self.impl == "pallas" and (self.qk_param == "joint"
                                  or self.attn_dropout):
      raise ValueError("attention impl 'pallas' needs qk_param='factored' "
                       "and attn_dropout=0.")
    if self.fused_qkv and self.qk_param == "joint":
      raise ValueError("fused_qkv needs qk_param='factored' (a joint W_QK "
                       "has no query and key projections).")
    if self.fused_qkv_attention and not (
        self.impl == "pallas" and self.fused_qkv and self.num_heads == 1):
      raise ValueError("fused_qkv_attention needs attention impl 'pallas', "
                       "fused_qkv and one head; got impl="
                       f"{self.impl!r}, fused_qkv={self.fused_qkv}, "
                       f"num_heads={self.num_heads}.")
    H = self.num_heads
    D = self.head_dim or d // H
    lam = head_temperature(self.temperature, D)
    kernels = (self.impl == "pallas"
               and not self.is_mutable_collection("intermediates"))
    if (kernels and self.fused_qkv_attention
        and attention_kernel.one_block(T)):
      ws, biases = self._qkv_params(d, H, D)
      return self._output(qkv_attention_kernel.projected_attention(
          x_BxTxd.astype(self.dtype), [w.astype(self.dtype) for w in ws],
          lam, biases=biases if self.use_bias else None,
          causal=self.causal), d)
    if kernels and self.fused_qkv and attention_kernel.one_block(T):
      qkv_BxTx3xHxD, biases = self._qkv(x_BxTxd, H, D, packed=True)
      return self._output(attention_kernel.packed_attention(
          qkv_BxTx3xHxD, lam, biases=biases, causal=self.causal), d)
    dense = lambda name, init: nn.DenseGeneral(  # noqa: E731
        (H, D), use_bias=self.use_bias, dtype=self.dtype, kernel_init=init,
        name=name)
    if self.qk_param == "joint":
      w_qk_HxDxd = self.param(
          "w_qk", nn.initializers.normal(0.5 / math.sqrt(d)), (H, d, d))
      # 0.5/sqrt(d): the std of W_Q^T W_K for two fairseq-initialised kernels.
      xw_BxTxHxd = jnp.einsum("bti,hij->bthj", x_BxTxd,
                              w_qk_HxDxd.astype(self.dtype))
      logits_BxHxTxT = jnp.einsum("bqhj,bkj->bhqk", xw_BxTxHxd, x_BxTxd)
      v_BxTxHxD = dense("value", _xavier_qkv)(x_BxTxd)
    elif self.fused_qkv:
      q_BxTxHxD, k_BxTxHxD, v_BxTxHxD = self._qkv(x_BxTxd, H, D)
    else:
      q_BxTxHxD = dense("query", _xavier_qkv)(x_BxTxd)
      k_BxTxHxD = dense("key", _xavier_qkv)(x_BxTxd)
      v_BxTxHxD = dense("value", _xavier_qkv)(x_BxTxd)
    if kernels:
      u_BxTxHxD = attention_kernel.attention(q_BxTxHxD, k_BxTxHxD, v_BxTxHxD,
                                             lam, causal=self.causal)
      return self._output(u_BxTxHxD, d)
    if self.qk_param != "joint":
      logits_BxHxTxT = jnp.einsum("bqhd,bkhd->bhqk", q_BxTxHxD, k_BxTxHxD)
    logits_BxHxTxT = logits_BxHxTxT.astype(jnp.float32) / lam
    self.sow("intermediates", "logits", logits_BxHxTxT)
    if self.causal:
      masked = jnp.where(causal_mask(T), logits_BxHxTxT,
                         jnp.finfo(jnp.float32).min)
    else:
      masked = logits_BxHxTxT
    probs_BxHxTxT = jax.nn.softmax(masked, axis=-1)
    self.sow("intermediates", "probs", probs_BxHxTxT)
    probs_BxHxTxT = nn.Dropout(self.attn_dropout)(
        probs_BxHxTxT, deterministic=deterministic)
    u_BxTxHxD = jnp.einsum("bhqk,bkhd->bqhd", probs_BxHxTxT.astype(self.dtype),
                           v_BxTxHxD)
    return self._output(u_BxTxHxD, d)

  def _qkv(self, x_BxTxd: jax.Array, H: int, D: int, packed: bool = False):
    """q, k, v [B, T, H, D] as one [d, 3HD] matmul (`fused_qkv`); `packed`:
    its output as it is, [B, T, 3, H, D] without the biases, and the biases
    (three [H, D], or None), for `attention_kernel.packed_attention`.

    Written in two dimensions on purpose: stacking the kernels on a new
    axis (or concatenating them along the head axis) gave the same kernel
    count but made XLA's layout assignment copy other parameters' AdamW
    state every step on the GPU (bench/gpu_results.md (13)).
    """
    B, T, d = x_BxTxd.shape
    kernels, biases = self._qkv_params(d, H, D)
    w_dx3HD = jnp.concatenate([w.reshape(d, H * D) for w in kernels],
                              axis=1).astype(self.dtype)
    qkv_BxTx3HD = jnp.einsum("btd,de->bte", x_BxTxd.astype(self.dtype),
                             w_dx3HD)
    if packed:
      return (qkv_BxTx3HD.reshape(B, T, 3, H, D),
              biases if self.use_bias else None)
    if self.use_bias:
      b_3HD = jnp.concatenate([b.reshape(H * D) for b in biases])
      qkv_BxTx3HD = qkv_BxTx3HD + b_3HD.astype(self.dtype)[None, None]
    return tuple(qkv_BxTx3HD[..., i * H * D:(i + 1) * H * D].reshape(
        B, T, H, D) for i in range(3))

  def _qkv_params(self, d: int, H: int, D: int):
    """The q, k, v kernels ([d, H, D] each) and biases (or Nones) of
    `fused_qkv`, as three `ProjectionParams`."""
    return zip(*(ProjectionParams((H, D), self.use_bias, name=name)(d)
                 for name in ("query", "key", "value")))

  def _output(self, u_BxTxHxD: jax.Array, d: int):
    """U [B, T, d] after the output projection (or the heads side by side
    without one); with `defer_out_bias`, (U without the projection's bias,
    that bias or None)."""
    B, T, H, D = u_BxTxHxD.shape
    if not self.out_proj:
      if H * D != d:
        raise ValueError(f"out_proj=False needs heads*head_dim == d, got "
                         f"{H}*{D} != {d}.")
      u_BxTxd = u_BxTxHxD.reshape(B, T, d)
      return (u_BxTxd, None) if self.defer_out_bias else u_BxTxd
    if not self.defer_out_bias:
      return nn.DenseGeneral(d, axis=(-2, -1), use_bias=self.use_bias,
                             dtype=self.dtype, kernel_init=_xavier,
                             name="out")(u_BxTxHxD)
    kernel_HxDxd, bias_d = ProjectionParams((d,), self.use_bias, _xavier,
                                            name="out")(H, D)
    if self.defer_out_proj:
      # cast before the reshape, as a scan's weight copy is: XLA may keep
      # a matmul's bf16 output in float32 when a cast follows it directly
      # (excess precision), so the order decides the gradient's bits
      return (u_BxTxHxD.reshape(B, T, H * D),
              kernel_HxDxd.astype(self.dtype).reshape(H * D, d), bias_d)
    return jnp.einsum("bthe,hed->btd", u_BxTxHxD.astype(self.dtype),
                      kernel_HxDxd.astype(self.dtype)), bias_d


class _KernelNorm(nn.Module):
  """A Post-LN LayerNorm computed inside a kernel, with the parameters of
  `nn.LayerNorm` (`scale` ones, `bias` zeros, [d]); `outputs=2` returns two
  references to the result, whose gradients the kernel adds."""
  epsilon: float = 1e-5
  outputs: int = 1
  dtype: Any = jnp.float32

  def _norm_params(self, d: int):
    """(scale, bias), `nn.LayerNorm`'s."""
    return (self.param("scale", nn.initializers.ones_init(), (d,)),
            self.param("bias", nn.initializers.zeros_init(), (d,)))


class AddDropoutNorm(_KernelNorm):
  """LayerNorm(x + mask * (u + u_bias)) as one kernel (`norm_kernel`);
  `u_bias` the sublayer's bias, None when `u` has it."""

  @nn.compact
  def __call__(self, x_BxTxd, u_BxTxd, mask_BxTxd, u_bias_d=None):
    scale, bias = self._norm_params(x_BxTxd.shape[-1])
    return norm_kernel.add_dropout_norm(
        x_BxTxd.astype(self.dtype), u_BxTxd.astype(self.dtype), mask_BxTxd,
        scale, bias, u_bias=u_bias_d, eps=self.epsilon, outputs=self.outputs)


class Block(nn.Module):
  r"""One transformer block (paper Sec. 2), Post-LN, Pre-LN or no LN.

  .. math:: Z = U(X) + X,\qquad X' = W_{F_2}\sigma(W_{F_1} Z) + Z

  (Post-LN normalises Z and X'; Pre-LN normalises the inputs of U and of the
  FFN.) Dropout follows the attention and the FFN, as in fairseq. With
  `fused_norm` (Post-LN) each residual sum, its dropout and its LayerNorm
  are one kernel (`AddDropoutNorm`), which also adds the bias of the
  sublayer's last projection (attention output, ffn2: applied without it),
  same parameters and dropout masks. Each normalised sum is then read twice
  (the residual stream, the next sublayer) through two references whose
  gradients the kernel adds (`norm_kernel`, `outputs=2`): the block takes
  x as an array or as such a pair (residual, sublayer input) and, with
  `two_outputs`, returns one. With `fused_ffn` too (ReLU, F = d) the FFN,
  its residual sum, dropout and LayerNorm are one kernel (`FFNNorm`,
  `ffn_kernel`), and with `fused_out_proj` the attention's output
  projection and its norm (`ProjNorm`, `proj_norm_kernel`), same
  parameters and dropout masks.
  Sows the block output `out` [B, T, d].
  """
  attention: dict
  ffn_dim: int
  activation: str = "relu"
  norm: str = "post"
  ffn_bias: bool = True
  dropout: float = 0.0
  fused_norm: bool = False             # Post-LN: add, dropout, LN one kernel
  fused_ffn: bool = False              # fused_norm: the FFN in it too (F = d)
  fused_out_proj: bool = False         # fused_norm: attention's W_O in it
  two_outputs: bool = False            # fused_norm: return (x', x')
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BxTxd, deterministic: bool = True):
    x_BxTxd, x_in_BxTxd = (x_BxTxd if isinstance(x_BxTxd, tuple)
                           else (x_BxTxd, x_BxTxd))
    d = x_BxTxd.shape[-1]
    if self.fused_norm and self.norm != "post":
      raise ValueError(f"fused_norm needs norm='post', got {self.norm!r}.")
    if self.fused_ffn and not (self.fused_norm and self.activation == "relu"
                               and self.ffn_dim == d):
      raise ValueError("fused_ffn needs fused_norm, activation='relu' and "
                       f"ffn_dim == d ({d}); got fused_norm="
                       f"{self.fused_norm}, activation={self.activation!r}, "
                       f"ffn_dim={self.ffn_dim}.")
    if self.fused_out_proj and not (self.fused_norm and self.attention.get(
        "out_proj", True)):
      raise ValueError("fused_out_proj needs fused_norm and out_proj=True "
                       "(the output projection joins the norm's kernel).")
    ln = lambda name: nn.LayerNorm(epsilon=1e-5, dtype=self.dtype,  # noqa: E731
                                   name=name)
    drop = nn.Dropout(self.dropout)

    def mask(shape):
      """The mask nn.Dropout draws (scaled by 1/keep), in float32, for the
      kernels that apply it (fused_norm and the options on top of it)."""
      return drop(jnp.ones(shape, jnp.float32), deterministic=deterministic)

    def residual(name, x, u, u_bias=None, outputs=1):
      """x + dropout(u + u_bias), layer-normed under Post-LN (u_bias, and
      `outputs` references to the result: only with fused_norm, which adds
      the sublayer's bias, and the references' gradients, in its kernel)."""
      if self.fused_norm:
        return AddDropoutNorm(outputs=outputs, dtype=self.dtype,
                              name=name)(x, u, mask(u.shape), u_bias)
      z = x + drop(u, deterministic=deterministic)
      return ln(name)(z) if self.norm == "post" else z

    h = ln("attn_ln")(x_in_BxTxd) if self.norm == "pre" else x_in_BxTxd
    u = SelfAttention(**self.attention, defer_out_bias=self.fused_norm,
                      defer_out_proj=self.fused_out_proj,
                      dtype=self.dtype, name="attn")(h, deterministic)
    if self.fused_out_proj:
      z_BxTxd, h = ProjNorm(outputs=2, dtype=self.dtype, name="attn_ln")(
          x_BxTxd, mask(x_BxTxd.shape), *u)
    elif self.fused_norm:
      z_BxTxd, h = residual("attn_ln", x_BxTxd, *u, outputs=2)
    else:
      z_BxTxd = h = residual("attn_ln", x_BxTxd, u)
    if self.fused_ffn:
      x_BxTxd = self._ffn_norm(z_BxTxd, h, mask(z_BxTxd.shape))
    else:
      h = ln("ffn_ln")(h) if self.norm == "pre" else h
      h_BxTxF = nn.Dense(self.ffn_dim, use_bias=self.ffn_bias,
                         dtype=self.dtype, kernel_init=_xavier,
                         name="ffn1")(h)
      h_BxTxF = ACTIVATIONS[self.activation](h_BxTxF)
      if self.fused_norm:          # ffn2's bias added in the norm kernel
        kernel_Fxd, bias_d = ProjectionParams((d,), self.ffn_bias, _xavier,
                                              name="ffn2")(self.ffn_dim)
        h = jnp.einsum("btf,fd->btd", h_BxTxF.astype(self.dtype),
                       kernel_Fxd.astype(self.dtype))
        x_BxTxd = residual("ffn_ln", z_BxTxd, h, bias_d,
                           outputs=1 + self.two_outputs)
      else:
        h = nn.Dense(d, use_bias=self.ffn_bias, dtype=self.dtype,
                     kernel_init=_xavier, name="ffn2")(h_BxTxF)
        x_BxTxd = residual("ffn_ln", z_BxTxd, h)
    self.sow("intermediates", "out", x_BxTxd[0] if isinstance(x_BxTxd, tuple)
             else x_BxTxd)
    return x_BxTxd

  def _ffn_norm(self, z_BxTxd, h_BxTxd, mask_BxTxd):
    """`fused_ffn`: ffn1, ffn2 and ffn_ln as one kernel (`ffn_kernel`),
    the same parameters (names, shapes, initial values) as the unfused
    Post-LN path; `mask_BxTxd` the dropout mask it draws there."""
    d = z_BxTxd.shape[-1]
    w1, b1 = ProjectionParams((self.ffn_dim,), self.ffn_bias, _xavier,
                              name="ffn1")(d)
    w2, b2 = ProjectionParams((d,), self.ffn_bias, _xavier,
                              name="ffn2")(self.ffn_dim)
    return FFNNorm(outputs=1 + self.two_outputs, dtype=self.dtype,
                   name="ffn_ln")((z_BxTxd, h_BxTxd), mask_BxTxd, w1, b1,
                                  w2, b2)


class ProjNorm(_KernelNorm):
  """LayerNorm(x + mask * (u W_O + b_O)) as one kernel (`proj_norm_kernel`);
  u the heads' outputs side by side."""

  @nn.compact
  def __call__(self, x_BxTxd, mask_BxTxd, u_BxTxHD, w_HDxd, b_d):
    scale, bias = self._norm_params(x_BxTxd.shape[-1])
    return proj_norm_kernel.proj_norm(
        x_BxTxd.astype(self.dtype), u_BxTxHD, mask_BxTxd, w_HDxd, b_d, scale,
        bias, eps=self.epsilon, outputs=self.outputs)


class FFNNorm(_KernelNorm):
  """LayerNorm(x + mask * (relu(x W1 + b1) W2 + b2)) as one kernel
  (`ffn_kernel`); x the pair of references (residual, FFN input) of the
  attention's `AddDropoutNorm(outputs=2)`."""

  @nn.compact
  def __call__(self, x_pair, mask_BxTxd, w1, b1, w2, b2):
    scale, bias = self._norm_params(x_pair[0].shape[-1])
    return ffn_kernel.ffn_norm(
        tuple(x.astype(self.dtype) for x in x_pair), mask_BxTxd, w1, b1, w2,
        b2, scale, bias, eps=self.epsilon, outputs=self.outputs)


class Decoder(nn.Module):
  """L blocks, plus a final LayerNorm for Pre-LN (fairseq's decoder)."""
  num_layers: int
  block: dict
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, deterministic: bool = True):
    for layer in range(self.num_layers):   # fused_norm: (x, x) between
      two = self.block.get("fused_norm", False) and layer < self.num_layers - 1
      x_BxTxd = Block(**self.block, two_outputs=two, dtype=self.dtype,
                      name=f"block_{layer}")(x_BxTxd, deterministic)
    if self.block.get("norm") == "pre":
      x_BxTxd = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype,
                             name="final_ln")(x_BxTxd)
    return x_BxTxd


class TheoryModel(nn.Module):
  r"""The model of paper Sec. 2: no embedding, :math:`F(X) = X^L` [B, T, d].

  The prediction of :math:`x_{T+1}` is the last row :math:`F(X)_T`.
  """
  num_layers: int
  block: dict
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, deterministic: bool = True):
    return Decoder(self.num_layers, self.block, self.dtype, name="decoder")(
        x_BxTxd.astype(self.dtype), deterministic).astype(jnp.float32)


def sinusoidal_positions(seq_len: int, d: int, offset: int = 2) -> np.ndarray:
  """fairseq's SinusoidalPositionalEmbedding [T, d]: [sin | cos] halves.

  Positions start at padding_idx + 1 = 2, as fairseq numbers them.
  """
  half = d // 2
  freq = np.exp(np.arange(half) * -(math.log(10000.0) / max(half - 1, 1)))
  pos = np.arange(offset, offset + seq_len)[:, None] * freq[None, :]
  emb = np.concatenate([np.sin(pos), np.cos(pos)], axis=1)
  if d % 2:
    emb = np.concatenate([emb, np.zeros((seq_len, 1))], axis=1)
  return emb.astype(np.float32)


LOSS_IMPLS = schema.LOSS_IMPLS


class OutputHead(nn.Module):
  r"""Untied output projection (no bias, as fairseq), or its fused loss.

  Called with targets it returns the weighted sum of token cross-entropies
  and the total weight, so the [B, T, V] logits are never materialised
  (same parameters as `nn.Dense(V, use_bias=False)`): through
  `qkspec.training.fused_xent.fused_cross_entropy` (`loss_impl="chunked"`,
  XLA, any device) or `qkspec.training.pallas_xent.linear_cross_entropy`
  (`"pallas"`, Triton kernels for a GPU; interpreted, slowly, on a CPU).
  """
  vocab_size: int
  loss_chunk: int = 128
  dtype: Any = jnp.float32
  kernel_grad: str = "vd"       # fused_xent.fused_cross_entropy's layout
  loss_impl: str = "chunked"    # LOSS_IMPLS
  pallas_settings: str = schema.PALLAS_SETTINGS  # BNxBVxWARPSxSTAGES
  loss_logits: str = "float32"  # LOSS_LOGITS: chunked loss's logits dtype

  @nn.compact
  def __call__(self, x_BxTxd: jax.Array, targets_BxT: jax.Array | None = None,
               weights_BxT: jax.Array | None = None):
    d = x_BxTxd.shape[-1]
    kernel_dxV = self.param("kernel", nn.initializers.normal(d**-0.5),
                            (d, self.vocab_size))
    if targets_BxT is None:
      logits_BxTxV = jnp.einsum("btd,dv->btv", x_BxTxd.astype(self.dtype),
                                kernel_dxV.astype(self.dtype),
                                preferred_element_type=jnp.float32)
      return logits_BxTxV.astype(jnp.float32)
    if weights_BxT is None:
      weights_BxT = jnp.ones(targets_BxT.shape, jnp.float32)
    x_Nxd = x_BxTxd.reshape(-1, d)
    targets_N = targets_BxT.reshape(-1)
    weights_N = weights_BxT.reshape(-1).astype(jnp.float32)
    if self.loss_impl == "pallas":
      loss_sum = pallas_xent.linear_cross_entropy(
          x_Nxd, kernel_dxV, targets_N, weights_N, compute_dtype=self.dtype,
          **schema.pallas_settings(self.pallas_settings))
    elif self.loss_impl == "chunked":
      logits_dtype = {"float32": jnp.float32,
                      "compute": self.dtype}[self.loss_logits]
      loss_sum = fused_xent.fused_cross_entropy(
          x_Nxd, kernel_dxV, None, targets_N, weights_N, self.loss_chunk,
          self.dtype, self.kernel_grad, logits_dtype)
    else:
      raise ValueError(f"loss_impl must be one of {LOSS_IMPLS}, got "
                       f"{self.loss_impl!r}.")
    return loss_sum, jnp.sum(weights_BxT)


class LanguageModel(nn.Module):
  r"""fairseq `transformer_lm` (Sec. 7, App. D): tokens [B, T] -> logits [B, T, V].

  Embedding scaled by :math:`\sqrt d`, sinusoidal positions, dropout, L
  causal decoder blocks, untied output projection (no bias).
  """
  vocab_size: int
  d_model: int
  num_layers: int
  block: dict
  dropout: float = 0.0
  dtype: Any = jnp.float32
  loss_chunk: int = 128
  loss_kernel_grad: str = "vd"
  loss_impl: str = "chunked"
  loss_pallas: str = schema.PALLAS_SETTINGS
  loss_logits: str = "float32"

  @nn.compact
  def __call__(self, tokens_BxT: jax.Array, deterministic: bool = True,
               targets_BxT: jax.Array | None = None,
               weights_BxT: jax.Array | None = None):
    """Logits [B, T, V]; with `targets_BxT`, the fused (loss sum, weight)."""
    d = self.d_model
    embed = nn.Embed(self.vocab_size, d,
                     embedding_init=nn.initializers.normal(d**-0.5),
                     name="embed")
    x_BxTxd = embed(tokens_BxT) * math.sqrt(d)
    x_BxTxd = x_BxTxd + sinusoidal_positions(tokens_BxT.shape[-1], d)[None]
    x_BxTxd = nn.Dropout(self.dropout)(x_BxTxd, deterministic=deterministic)
    x_BxTxd = Decoder(self.num_layers, self.block, self.dtype, name="decoder")(
        x_BxTxd.astype(self.dtype), deterministic)
    head = OutputHead(self.vocab_size, self.loss_chunk, self.dtype,
                      self.loss_kernel_grad, self.loss_impl,
                      self.loss_pallas, self.loss_logits, name="output")
    return head(x_BxTxd, targets_BxT, weights_BxT)


def head_temperature(temperature: float | None, head_dim: int) -> float:
  r"""The softmax temperature :math:`\lambda`: `temperature`, or :math:`\sqrt D`.

  None means :math:`\sqrt D` with D = `head_dim`, fairseq's scaling (the
  paper's :math:`\sqrt d` for one head). The one place this default lives.
  """
  return math.sqrt(head_dim) if temperature is None else temperature


def attention_temperature(model_config) -> float:
  r"""The :math:`\lambda` of every attention layer of `config.model`.

  `model.temperature`; None means :math:`\sqrt{d/H}`, the square root of
  the head width. The attention divides its logits by it, and
  `qkspec.training.layer_stats` passes it to
  `qkspec.theory.spectrum.spectrum_stats` (per head: W_QK is d x d but
  :math:`\lambda = \sqrt D`).

  `temperature=0.0` is the old spelling of None: it still means
  :math:`\sqrt D`, with a FutureWarning.
  """
  m = model_config
  temperature = m.temperature
  if temperature is not None and temperature == 0:
    warnings.warn("config.model.temperature=0.0 is the old spelling of "
                  "None, which replaced it: None means sqrt(head width). "
                  "Leave the field unset (or pass a value > 0).",
                  FutureWarning)   # one location: shown once per process
    temperature = None
  return head_temperature(temperature, m.d_model // m.num_heads)


def make_model(model_config, task: str, vocab_size: int | None = None,
               dtype: Any = jnp.float32) -> nn.Module:
  """Builds the module of `task` ("theory" or "lm") from `config.model`."""
  m = model_config
  attention = dict(num_heads=m.num_heads, head_dim=m.d_model // m.num_heads,
                   qk_param=m.qk_param, use_bias=m.qkv_bias,
                   out_proj=m.out_proj, causal=m.causal,
                   temperature=attention_temperature(m),
                   attn_dropout=m.attn_dropout,
                   impl=m.get("attention_impl", "xla"),
                   fused_qkv=m.get("fused_qkv", False),
                   fused_qkv_attention=m.get("fused_qkv_attention", False))
  block = dict(attention=attention, ffn_dim=m.ffn_dim, activation=m.activation,
               norm=m.norm, ffn_bias=m.ffn_bias, dropout=m.dropout,
               fused_norm=m.get("fused_norm", False),
               fused_ffn=m.get("fused_ffn", False),
               fused_out_proj=m.get("fused_out_proj", False))
  if task == "theory":
    return TheoryModel(m.num_layers, block, dtype)
  if vocab_size is None:
    raise ValueError("the lm task needs vocab_size.")
  return LanguageModel(vocab_size, m.d_model, m.num_layers, block, m.dropout,
                       dtype, m.loss_chunk, m.get("loss_kernel_grad", "vd"),
                       m.get("loss_impl", "chunked"),
                       m.get("loss_pallas", schema.PALLAS_SETTINGS),
                       m.get("loss_logits", "float32"))


def _layer_index(name: str) -> int:
  return int(re.fullmatch(r"block_(\d+)", name).group(1))


def attention_params(params) -> list[dict]:
  """The `attn` parameter dicts of every block, ordered by layer."""
  decoder = params["decoder"]
  names = sorted((n for n in decoder if n.startswith("block_")),
                 key=_layer_index)
  return [decoder[n]["attn"] for n in names]


def qk_from_kernels(wq_kernel: jax.Array, wk_kernel: jax.Array) -> jax.Array:
  r""":math:`W_{QK} = W_Q^\top W_K` from Flax `Dense`/`DenseGeneral` kernels.

  A Flax kernel maps rows, `q = x @ kernel`, so the paper's
  :math:`W_Q` (:math:`D \times d`) is `wq_kernel.T` and

  .. math:: W_{QK} = \texttt{wq\_kernel} \cdot \texttt{wk\_kernel}^\top,\qquad
            q_t^\top k_j = x_t^\top W_{QK} x_j.

  Args:
    wq_kernel: [d, D], or [d, H, D] (`DenseGeneral` with heads).
    wk_kernel: same shape.

  Returns:
    W_QK [d, d], or [H, d, d] per head.
  """
  wq_kernel, wk_kernel = jnp.asarray(wq_kernel), jnp.asarray(wk_kernel)
  if jnp.shape(wq_kernel) != jnp.shape(wk_kernel):
    raise ValueError("wq_kernel and wk_kernel must have the same shape, got "
                     f"{jnp.shape(wq_kernel)} and {jnp.shape(wk_kernel)}.")
  if wq_kernel.ndim == 2:
    return wq_kernel @ wk_kernel.T
  if wq_kernel.ndim == 3:
    return jnp.einsum("ihk,jhk->hij", wq_kernel, wk_kernel)
  raise ValueError("kernels must be [d, D] or [d, H, D], got shape "
                   f"{jnp.shape(wq_kernel)}.")


def qk_matrices(params) -> jax.Array:
  r""":math:`W_{QK} = W_Q^\top W_K` of every layer and head, [L, H, d, d].

  Unscaled (the logits divide by :math:`\lambda` separately), as LocATER and
  Fig. 6B use them. Works on a params tree with leading (e.g. sweep) axes
  only under `jax.vmap`. From Q/K kernels, the layers' kernels are stacked
  and multiplied in one batched matmul (one kernel forward and two backward
  on a GPU, where a product per layer launched 3 L: bench/gpu_results.md
  (17)).
  """
  attns = attention_params(params)
  if any("w_qk" in attn for attn in attns):
    return jnp.stack([attn["w_qk"] if "w_qk" in attn else
                      qk_from_kernels(attn["query"]["kernel"],
                                      attn["key"]["kernel"])
                      for attn in attns])
  stacked = lambda name: jnp.stack([a[name]["kernel"] for a in attns])  # noqa: E731
  return jax.vmap(qk_from_kernels)(stacked("query"), stacked("key"))
