r"""Optional fast paths of the model, behind one switch: `model.kernels`.

Shapes: B = batch, T = tokens, H = heads, D = head width, d = model width,
N = tokens as rows, V = vocabulary.

The model calls these three functions and names no kernel; each equals the
XLA reference beside it in value and gradient (tests/kernels_test.py and
one test file per kernel module, Pallas in its interpreter on a CPU):

* `attention`: softmax(mask(Q K^T / lambda)) V per head from the packed QKV
  projections (`attention_reference`);
* `post_ln`: LayerNorm(x + mask * u), Post-LN's add, dropout and
  LayerNorm (`post_ln_reference`);
* `output_xent`: sum_n w_n CE(h_n W, y_n), the output projection and the
  cross-entropy (`output_xent_reference`).

"xla" (the default, any device): the model's Flax layers and the chunked
XLA loss (`chunked_xent`). "pallas" (Hopper GPUs): one Triton kernel each
way for `attention` and `post_ln`, the loss through FlashAttention-3
(`flash_xent`); bench/README.md has their measured speed.
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.kernels import fused_attention
from qkspec.kernels import chunked_xent
from qkspec.kernels import flash_xent
from qkspec.kernels import fused_layer_norm

IMPLS = ("xla", "pallas")


def attention(qkv_BxTx3xHxD: jax.Array, temperature: float, *,
              biases=None, causal: bool = True) -> jax.Array:
  r""":math:`U = \mathrm{softmax}(\mathrm{mask}(QK^\top/\lambda))V` per head,
  [B, T, H, D], in Pallas (`fused_attention`), from the q, k, v
  projections side by side without biases; `temperature` a Python number,
  `biases` (b_q, b_k, b_v) each [H, D] or None.
  """
  return fused_attention.packed_attention(qkv_BxTx3xHxD, temperature,
                                        biases=biases, causal=causal)


def attention_reference(qkv_BxTx3xHxD, temperature, *, biases=None,
                        causal: bool = True) -> jax.Array:
  """`attention` in float32 jnp."""
  qkv = qkv_BxTx3xHxD.astype(jnp.float32)
  q, k, v = (qkv[:, :, i] + (0.0 if biases is None else biases[i][None, None])
             for i in range(3))
  logits_BxHxTxT = jnp.einsum("bqhd,bkhd->bhqk", q, k) / temperature
  if causal:
    T = logits_BxHxTxT.shape[-1]
    logits_BxHxTxT = jnp.where(jnp.tril(jnp.ones((T, T), bool)),
                               logits_BxHxTxT, jnp.finfo(jnp.float32).min)
  return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits_BxHxTxT, -1), v)


def post_ln(x: jax.Array, u: jax.Array, mask: jax.Array, scale: jax.Array,
            bias: jax.Array, *, eps: float = 1e-5) -> jax.Array:
  r""":math:`\mathrm{LayerNorm}(x + m \odot u)` over the last axis, in x's
  dtype, in Pallas (`fused_layer_norm`): x, u [..., d] a sublayer's input
  and output, `mask` [..., d] the dropout mask scaled by 1/keep (no
  gradient), `scale`, `bias` [d] the LayerNorm's :math:`\gamma, \beta`.
  """
  return fused_layer_norm.add_dropout_norm(x, u, mask, scale, bias, eps=eps)


def post_ln_reference(x, u, mask, scale, bias, *, eps: float = 1e-5
                      ) -> jax.Array:
  """`post_ln` in float32 jnp (the variance in two passes)."""
  z = x.astype(jnp.float32) + u.astype(jnp.float32) * mask
  zc = z - jnp.mean(z, axis=-1, keepdims=True)
  var = jnp.mean(zc * zc, axis=-1, keepdims=True)
  row = lambda v: v.reshape((1,) * (x.ndim - 1) + (-1,))  # noqa: E731
  return zc * jax.lax.rsqrt(var + eps) * row(scale) + row(bias)


def output_xent(h_Nxd: jax.Array, kernel_dxV: jax.Array,
                targets_N: jax.Array, weights_N: jax.Array, *,
                impl: str = "xla", compute_dtype=jnp.float32) -> jax.Array:
  r"""Float32 :math:`\sum_n w_n \mathrm{CE}(h_n W, y_n)` without the [N, V]
  logits in memory: `kernel_dxV` W has no bias, `weights_N` are 0 for
  padding (not differentiated), `impl` is "xla" (`chunked_xent`, matmuls
  in `compute_dtype`) or "pallas" (`flash_xent`, float16).
  """
  if impl == "xla":
    return chunked_xent.fused_cross_entropy(h_Nxd, kernel_dxV, targets_N,
                                            weights_N, chunked_xent.CHUNK,
                                            compute_dtype)
  if impl == "pallas":
    return flash_xent.cross_entropy_sum(h_Nxd, kernel_dxV, targets_N,
                                        weights_N)
  raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}.")


def output_xent_reference(h_Nxd, kernel_dxV, targets_N, weights_N
                          ) -> jax.Array:
  """`output_xent` from the whole [N, V] logits in float32."""
  logits = h_Nxd.astype(jnp.float32) @ kernel_dxV.astype(jnp.float32)
  lse = jax.nn.logsumexp(logits, axis=-1)
  z_y = jnp.take_along_axis(logits, targets_N[:, None], axis=-1)[:, 0]
  return jnp.sum(weights_N.astype(jnp.float32) * (lse - z_y))
