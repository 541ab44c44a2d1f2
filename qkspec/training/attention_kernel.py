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
import jax.numpy as jnp

from qkspec.training import pallas_common

BLOCK = 64     # query and key block: T = 64 (the paper's) is one of each


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
  interpret = pallas_common.interpret_mode(
      interpret, "the attention kernels (attention_impl='pallas')",
      "attention_impl='xla'")
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
