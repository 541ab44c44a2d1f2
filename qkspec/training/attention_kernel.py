r"""The model's causal self-attention as fused kernels (GPU, Pallas/Triton).

Shapes: B = batch, T = tokens, H = heads, D = head width.

`SelfAttention` computes, per head (paper Eq. 1-2),

.. math:: A = \mathrm{softmax}_j\big(\mathrm{mask}(QK^\top/\lambda)\big),
          \qquad U = A V,

in XLA as a matmul, a softmax and a matmul: on a GPU four kernels forward
and, with the transposes its layouts need, about nine backward, each of
which does almost nothing at the paper's sizes (T = 64, D = 32 or 128:
a 64 x 64 tile per sequence). The small models' steps are bound by the
number of kernels they launch, not by their work (bench/gpu_results.md
(12): ~79 a layer, ~6 us each on an H200). `attention` does the same sum
as one kernel forward and two backward: the FlashAttention algorithm of
jax's Pallas example (`jax.experimental.pallas.ops.gpu.attention.mha`,
Triton): one program per (sequence, head) keeps its Q, K, V tiles in
registers, computes the logits in float32 from the half-precision Q and K,
the masked softmax in float32 (as a running maximum and sum over key
blocks; at T = 64 one block) and its log-sum-exp, and multiplies the
probabilities, rounded to V's dtype, by V. The backward recomputes the
probabilities from the log-sum-exp (a first kernel computes
:math:`\delta_t = \sum_d dU_{td} U_{td}`, a second dQ, dK and dV).

`packed_attention` is the same sum written here for one block (T <= 64,
the paper's sequences) over the QKV matmul's output as it is, [B, T, 3,
H, D], the biases added inside: one kernel forward and one backward,
where `attention` needs XLA kernels around its own (the comment opening
that part of this module).

Same maths as the XLA path, one rounding fewer: XLA rounds the logits to
the compute dtype (bfloat16) before its float32 softmax, the kernel keeps
them in float32 (tests/attention_kernel_test.py: float32 agrees to 1e-5,
bfloat16 within its rounding). It computes no logits or probabilities
for the model to sow, so `SelfAttention` uses it only when the
"intermediates" collection is not being collected; measurements
(`layer_stats`) take the XLA path, with the same parameters.

On a CPU the kernels run in Pallas' interpreter (tests); on a TPU there is
no Triton. Under a multi-device mesh the kernels are opaque to XLA's
partitioner, as `pallas_xent`'s are (expected to gather their inputs to
each device: correct, not fast; not measured): the option is for one
GPU. jax 0.11 marks the example deprecated in favour of tokamax's
`dot_product_attention`, whose Triton implementation compiles to as many
kernels here (`bench/deviceless.py --attention`; its FlashAttention-3 one
wants 128-token query blocks) but would be a dependency; the example is
still shipped, and the same in jax 0.10, 0.11 and 0.12 (the tests pass
under each).
"""
import functools
import warnings

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp

from qkspec.training import pallas_common

BLOCK = 64     # query and key block: T = 64 (the paper's) is one of each


def _interpret(interpret):
  return pallas_common.interpret_mode(
      interpret, "the attention kernels (attention_impl='pallas')",
      "attention_impl='xla'")


def block_size(seq_len: int) -> int:
  """The kernels' query/key block for T tokens: min(BLOCK, T), which must
  divide T."""
  return pallas_common.fitting_block(seq_len, BLOCK,
                       "attention_impl='pallas' needs the sequence length")


@functools.cache
def _mha():
  """jax's Pallas attention example, imported on first use (only this
  option needs it; jax 0.11 warns that it is deprecated)."""
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", DeprecationWarning)
      from jax.experimental.pallas.ops.gpu import attention  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        f"attention_impl='pallas' needs jax.experimental.pallas.ops.gpu."
        f"attention, which jax {jax.__version__} lacks; use "
        f"attention_impl='xla'.") from e
  return attention


def attention(q_BxTxHxD: jax.Array, k_BxTxHxD: jax.Array,
              v_BxTxHxD: jax.Array, temperature: float, *,
              causal: bool = True, interpret: bool | None = None
              ) -> jax.Array:
  r""":math:`U = \mathrm{softmax}(\mathrm{mask}(QK^\top/\lambda))V` per
  head, [B, T, H, D] in V's dtype, with a fused backward (module doc).

  Args:
    q_BxTxHxD, k_BxTxHxD, v_BxTxHxD: queries, keys, values (biases added).
    temperature: :math:`\lambda` (the logits are divided by it).
    causal: query t sees keys j <= t.
    interpret: run in Pallas' interpreter; None: on a CPU only.
  """
  interpret = _interpret(interpret)
  b = block_size(q_BxTxHxD.shape[1])
  mha = _mha()
  blocks = mha.BlockSizes(block_q=b, block_k=b, block_q_dkv=b,
                           block_kv_dkv=b, block_q_dq=b, block_kv_dq=b)
  dtype = v_BxTxHxD.dtype
  return mha.mha(q_BxTxHxD.astype(dtype), k_BxTxHxD.astype(dtype),
                  v_BxTxHxD, None, sm_scale=1.0 / temperature, causal=causal,
                  block_sizes=blocks, interpret=interpret)


def reference(q_BxTxHxD, k_BxTxHxD, v_BxTxHxD, temperature: float, *,
              causal: bool = True) -> jax.Array:
  """The same sum in float32 jnp (tests)."""
  f32 = lambda x: x.astype(jnp.float32)  # noqa: E731
  logits = jnp.einsum("bqhd,bkhd->bhqk", f32(q_BxTxHxD),
                      f32(k_BxTxHxD)) / temperature
  if causal:
    T = logits.shape[-1]
    logits = jnp.where(jnp.tril(jnp.ones((T, T), bool)), logits,
                       jnp.finfo(jnp.float32).min)
  return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, -1),
                    f32(v_BxTxHxD))


# --- One block over the packed projections -----------------------------
#
# At T <= BLOCK a sequence is one query block and one key block, and the
# attention of a head is a handful of tile products. `packed_attention`
# computes it from the QKV matmul's output as it is, [B, T, 3, H, D] (no
# slicing into three arrays), adds the three biases itself and, backward,
# writes dQ, dK, dV side by side in the same layout with the biases'
# per-sequence sums: one kernel forward (where the example's path launches
# an XLA kernel for the bias and the slices, then its own) and one
# backward (its preprocessing and main kernels, then XLA's concatenation;
# bench/gpu_results.md (18)). Backward, with P the probabilities
# recomputed from the log-sum-exp, dP = dU V^T and s = 1/lambda:
#
#   dV = P^T dU,  dS = P * (dP - rowsum(P * dP)) * s,  dQ = dS K,
#   dK = dS^T Q
#
# (rowsum(P * dP) is FlashAttention's delta = rowsum(dU * U), taken from
# the whole row it has here, so no output needs to be kept for it).

def one_block(seq_len: int) -> bool:
  """Whether `packed_attention` takes T tokens (T <= BLOCK)."""
  return seq_len <= BLOCK


def _tiles(qkv_ref, bias_refs, dtype):
  """q, k, v [T, D] of a (sequence, head), biases added, in `dtype`."""
  return [pallas_common.with_bias(qkv_ref[:, i, :],
                                  bias_refs[i] if bias_refs else None, dtype)
          for i in range(3)]


def attend(q, k, v, scale, causal):
  """(U [T, D] float32, lse [T]) of one (sequence, head): the section's
  forward, in a kernel; `qkv_attention_kernel` shares it. `v` may be a
  function that returns it, called after the softmax (so that a kernel
  computing v holds it only from there)."""
  s = _logits(q, k, scale, causal)
  m = jnp.max(s, axis=1)
  p = jnp.exp(s - m[:, None])
  l = jnp.sum(p, axis=1)
  v = v() if callable(v) else v
  return plgpu.dot(p.astype(v.dtype), v) / l[:, None], m + jnp.log(l)


def attend_backward(q, k, v, lse, du, scale, causal, emit=None):
  """(dQ, dK, dV) [T, D] float32 of one (sequence, head) from the
  log-sum-exp and dU (the section's backward).

  `v` may be a function that returns it (called once, where it is first
  needed), and `emit(i, g)` is handed each gradient (i = 0, 1, 2 for dQ,
  dK, dV) as soon as it is computed: dV first, then dQ and dK. A kernel
  that computes v or uses a gradient there, not after all three, holds
  fewer tiles at once (`qkv_attention_kernel` at d = 128 on an H100:
  40 bytes a thread spilled, not 64, and its matmuls no longer
  serialized for want of registers).
  """
  emit = emit or (lambda i, g: None)
  p = jnp.exp(_logits(q, k, scale, causal) - lse[:, None])
  dv = plgpu.dot(p.astype(du.dtype).T, du)
  emit(2, dv)
  v = v() if callable(v) else v
  dp = plgpu.dot(du, v.T)
  ds = p * (dp - jnp.sum(p * dp, axis=1)[:, None]) * scale
  dq = plgpu.dot(ds.astype(k.dtype), k)
  emit(0, dq)
  dk = plgpu.dot(ds.astype(q.dtype).T, q)
  emit(1, dk)
  return dq, dk, dv


def _logits(q, k, scale, causal):
  """s q k^T in float32 [T, T], -inf where the mask hides a key."""
  s = plgpu.dot(q, k.T) * scale
  if causal:
    t = s.shape[0]
    rows = jax.lax.broadcasted_iota(jnp.int32, (t, t), 0)
    cols = jax.lax.broadcasted_iota(jnp.int32, (t, t), 1)
    s = jnp.where(rows >= cols, s, -jnp.inf)
  return s


def _packed_forward_kernel(qkv_ref, *refs, scale, causal):
  """`refs`: [the three biases,] then the outputs u [T, D], lse [T]."""
  *bias_refs, u_ref, lse_ref = refs
  q, k, v = _tiles(qkv_ref, bias_refs, u_ref.dtype)
  u, lse = attend(q, k, v, scale, causal)
  u_ref[...] = u.astype(u_ref.dtype)
  lse_ref[...] = lse


def _packed_backward_kernel(qkv_ref, *refs, scale, causal):
  """`refs`: [the three biases,] lse, du, then the outputs dqkv [T, 3, D]
  [and the biases' sums over the sequence, [3, D]]: 7 with biases, 3
  without."""
  biased = len(refs) == 7
  bias_refs = refs[:3] if biased else ()
  lse_ref, du_ref, dqkv_ref = refs[len(bias_refs):len(bias_refs) + 3]
  q, k, v = _tiles(qkv_ref, bias_refs, du_ref.dtype)
  dq, dk, dv = attend_backward(q, k, v, lse_ref[...], du_ref[...], scale,
                               causal)
  for i, g in enumerate((dq, dk, dv)):
    dqkv_ref[:, i, :] = g.astype(dqkv_ref.dtype)
    if biased:
      refs[-1][i, :] = jnp.sum(g, axis=0)


def _packed_specs(qkv_shape, biased: bool):
  """The grid (B, H) and the blocks of qkv (and dqkv), the biases, a
  [B, T, H, D] tile and lse [B, H, T]."""
  B, T, _, H, D = qkv_shape
  packed = pl.BlockSpec((None, T, 3, None, D), lambda b, h: (b, 0, 0, h, 0))
  bias = [pl.BlockSpec((None, D), lambda b, h: (h, 0))] * (3 * biased)
  tile = pl.BlockSpec((None, T, None, D), lambda b, h: (b, 0, h, 0))
  lse = pl.BlockSpec((None, None, T), lambda b, h: (b, h, 0))
  return (B, H), packed, bias, tile, lse


def _packed_forward(qkv, biases, scale, causal, interpret):
  B, T, _, H, D = qkv.shape
  grid, packed, bias, tile, lse = _packed_specs(qkv.shape, bool(biases))
  return pl.pallas_call(
      functools.partial(_packed_forward_kernel, scale=scale, causal=causal),
      grid=grid, in_specs=[packed] + bias, out_specs=[tile, lse],
      out_shape=[jax.ShapeDtypeStruct((B, T, H, D), qkv.dtype),
                 jax.ShapeDtypeStruct((B, H, T), jnp.float32)],
      compiler_params=pallas_common.layer_params(D),
      interpret=interpret, name="packed_attention",
  )(qkv, *biases)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _packed(qkv, biases, scale, causal, interpret):
  return _packed_forward(qkv, biases, scale, causal, interpret)[0]


def _packed_vjp_forward(qkv, biases, scale, causal, interpret):
  u, lse = _packed_forward(qkv, biases, scale, causal, interpret)
  return u, (qkv, biases, lse)


def _packed_vjp_backward(scale, causal, interpret, residuals, du):
  qkv, biases, lse = residuals
  B, _, _, H, D = qkv.shape
  grid, packed, bias, tile, lse_spec = _packed_specs(qkv.shape, bool(biases))
  sums = [pl.BlockSpec((None, 3, None, D), lambda b, h: (b, 0, h, 0))]
  out = pl.pallas_call(
      functools.partial(_packed_backward_kernel, scale=scale, causal=causal),
      grid=grid, in_specs=[packed] + bias + [lse_spec, tile],
      out_specs=[packed] + sums * bool(biases),
      out_shape=[jax.ShapeDtypeStruct(qkv.shape, qkv.dtype)]
      + [jax.ShapeDtypeStruct((B, 3, H, D), jnp.float32)] * bool(biases),
      compiler_params=pallas_common.layer_params(D),
      interpret=interpret, name="packed_attention_backward",
  )(qkv, *biases, lse, du.astype(qkv.dtype))
  if not biases:
    return out[0], ()
  db_3xHxD = jnp.sum(out[1], axis=0)
  return out[0], tuple(db_3xHxD[i].astype(b.dtype)
                       for i, b in enumerate(biases))


_packed.defvjp(_packed_vjp_forward, _packed_vjp_backward)


def packed_attention(qkv_BxTx3xHxD: jax.Array, temperature: float, *,
                     biases: tuple[jax.Array, ...] | None = None,
                     causal: bool = True, interpret: bool | None = None
                     ) -> jax.Array:
  r""":math:`U = \mathrm{softmax}(\mathrm{mask}(QK^\top/\lambda))V` per head
  from the projections side by side, [B, T, H, D] in their dtype; one
  kernel forward and one backward (the section above), for T <= BLOCK.

  Args:
    qkv_BxTx3xHxD: queries, keys, values [B, T, 3, H, D] (the QKV matmul's
      output, reshaped), without their biases.
    temperature: :math:`\lambda`.
    biases: (b_q, b_k, b_v), each [H, D], added in the kernel; None: none.
    causal: query t sees keys j <= t.
    interpret: run in Pallas' interpreter; None: on a CPU only.
  """
  interpret = _interpret(interpret)
  T = qkv_BxTx3xHxD.shape[1]
  if not one_block(T) or qkv_BxTx3xHxD.shape[2] != 3:
    raise ValueError(f"packed_attention takes [B, T <= {BLOCK}, 3, H, D], "
                     f"got {qkv_BxTx3xHxD.shape}.")
  return _packed(qkv_BxTx3xHxD, tuple(biases or ()), 1.0 / temperature,
                 causal, interpret)
