r"""A single head's q, k, v projections and its causal attention as one
kernel each way (GPU, Pallas/Triton).

Shapes: B = sequences, T <= 64 tokens, d = model width, D = head width
(one head, the paper's models).

With `attention_kernel.packed_attention` a layer's attention is still
three kernels forward (the q, k, v weights' concatenation, the QKV
matmul, the attention) and three backward (the attention's, the QKV
input gradient's matmul, the weight gradient's). `projected_attention`
multiplies x by :math:`W_Q, W_K, W_V` inside the attention's kernel, one
program per sequence (x [T, d] and the three [d, D] weights in registers
and shared memory), and backward recomputes q, k, v, runs
`attention_kernel.attend_backward` and returns

.. math:: dx = dQ\,W_Q^\top + dK\,W_K^\top + dV\,W_V^\top

from the same kernel, with dQ, dK, dV side by side for the weight
gradient :math:`x^\top [dQ, dK, dV]` (XLA's matmul over all rows, as
before) and the biases' per-sequence sums: 1 kernel forward and 3
backward (with the sum) instead of 3 and 4.

Same roundings as the packed path under a half-precision compute dtype
(q, k, v rounded to it as the QKV matmul's output, then the biases added
as `pallas_common.with_bias` adds them; dQ, dK, dV rounded before the
input gradient's products, which are summed in float32 and rounded
once, as XLA's one matmul over the 3D columns); tests/
qkv_attention_kernel_test.py checks values and gradients against
autodiff. On a CPU the kernels run in Pallas' interpreter; one GPU only.
"""
import functools

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp

from qkspec.training import attention_kernel
from qkspec.training import pallas_common


def _interpret(interpret):
  return pallas_common.interpret_mode(
      interpret, "fused_qkv_attention's kernels", "fused_qkv_attention=False")


def _projections(x, w_refs, bias_refs, dtype):
  """q, k, v [T, D] of a sequence, as the packed path has them."""
  return [pallas_common.with_bias(plgpu.dot(x, w[...]).astype(dtype), b,
                                  dtype)
          for w, b in zip(w_refs, bias_refs or (None,) * len(w_refs))]


def _lazy_v(x, w_refs, bias_refs, dtype):
  """v as a function for `attention_kernel.attend(_backward)` to call where
  it first needs it: with q, k and v computed at once the forward used
  255 registers and spilled 160 bytes a thread at d = 128 on an H100,
  with v computed after the softmax 194 and none."""
  return lambda: _projections(x, w_refs[2:], bias_refs[2:], dtype)[0]


def _forward_kernel(x_ref, *refs, scale, causal, biased):
  """`refs`: wq, wk, wv, [bq, bk, bv,] then the outputs u [T, D], lse."""
  w_refs, bias_refs = refs[:3], refs[3:6] if biased else ()
  u_ref, lse_ref = refs[-2:]
  x = x_ref[...]
  q, k = _projections(x, w_refs[:2], bias_refs[:2], u_ref.dtype)
  u, lse = attention_kernel.attend(
      q, k, _lazy_v(x, w_refs, bias_refs, u_ref.dtype), scale, causal)
  u_ref[...] = u.astype(u_ref.dtype)
  lse_ref[...] = lse


def _backward_kernel(x_ref, *refs, scale, causal, biased):
  """`refs`: wq, wk, wv, [bq, bk, bv,] lse, du, then the outputs dx
  [T, d], dqkv [T, 3, D] and the biases' sums [3, D]."""
  w_refs, bias_refs = refs[:3], refs[3:6] if biased else ()
  lse_ref, du_ref, dx_ref, dqkv_ref, sums_ref = refs[3 + 3 * biased:]
  x = x_ref[...]
  dtype = x.dtype
  q, k = _projections(x, w_refs[:2], bias_refs[:2], dtype)
  parts = {}

  def emit(i, g):
    # each gradient's share of dx as soon as the gradient is computed (dV
    # first); dx = (dQ's + dK's) + dV's, the order it had when the three
    # gradients were computed first
    g_c = g.astype(dtype)
    dqkv_ref[:, i, :] = g_c
    sums_ref[i, :] = jnp.sum(g, axis=0)
    parts[i] = plgpu.dot(g_c, w_refs[i][...].T)
    if i == 1:
      parts[1] = parts.pop(0) + parts[1]

  attention_kernel.attend_backward(
      q, k, _lazy_v(x, w_refs, bias_refs, dtype), lse_ref[...], du_ref[...],
      scale, causal, emit)
  dx_ref[...] = (parts[1] + parts[2]).astype(dx_ref.dtype)


def _specs(x_shape, head: int, biased: bool):
  """The grid (B,) and the blocks of x, a weight [d, D], a bias [D], a
  [B, T, D] tile and lse [B, T]."""
  _, T, d = x_shape
  return ((x_shape[0],), pl.BlockSpec((None, T, d), lambda b: (b, 0, 0)),
          pl.BlockSpec((d, head), lambda b: (0, 0)),
          [pl.BlockSpec((head,), lambda b: (0,))] * (3 * biased),
          pl.BlockSpec((None, T, head), lambda b: (b, 0, 0)),
          pl.BlockSpec((None, T), lambda b: (b, 0)))


def _forward(x, ws, biases, scale, causal, interpret):
  B, T, d = x.shape
  D = ws[0].shape[1]
  grid, x_spec, w_spec, b_specs, tile, lse = _specs(x.shape, D, bool(biases))
  return pl.pallas_call(
      functools.partial(_forward_kernel, scale=scale, causal=causal,
                        biased=bool(biases)),
      grid=grid, in_specs=[x_spec] + [w_spec] * 3 + b_specs,
      out_specs=[tile, lse],
      out_shape=[jax.ShapeDtypeStruct((B, T, D), x.dtype),
                 jax.ShapeDtypeStruct((B, T), jnp.float32)],
      compiler_params=pallas_common.layer_params(max(D, d)),
      interpret=interpret, name="qkv_attention",
  )(x, *ws, *biases)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _projected(x, ws, biases, scale, causal, interpret):
  return _forward(x, ws, biases, scale, causal, interpret)[0]


def _vjp_forward(x, ws, biases, scale, causal, interpret):
  u, lse = _forward(x, ws, biases, scale, causal, interpret)
  return u, (x, ws, biases, lse)


def _vjp_backward(scale, causal, interpret, residuals, du):
  x, ws, biases, lse = residuals
  B, T, d = x.shape
  D = ws[0].shape[1]
  grid, x_spec, w_spec, b_specs, tile, lse_spec = _specs(x.shape, D,
                                                         bool(biases))
  dx, dqkv, sums = pl.pallas_call(
      functools.partial(_backward_kernel, scale=scale, causal=causal,
                        biased=bool(biases)),
      grid=grid, in_specs=[x_spec] + [w_spec] * 3 + b_specs
      + [lse_spec, tile],
      out_specs=[x_spec,
                 pl.BlockSpec((None, T, 3, D), lambda b: (b, 0, 0, 0)),
                 pl.BlockSpec((None, 3, D), lambda b: (b, 0, 0))],
      out_shape=[jax.ShapeDtypeStruct(x.shape, x.dtype),
                 jax.ShapeDtypeStruct((B, T, 3, D), x.dtype),
                 jax.ShapeDtypeStruct((B, 3, D), jnp.float32)],
      compiler_params=pallas_common.layer_params(max(D, d)),
      interpret=interpret, name="qkv_attention_backward",
  )(x, *ws, *biases, lse, du.astype(x.dtype))
  # the weight gradient as the packed path's one matmul over all rows
  dw = jnp.einsum("btd,bte->de", x, dqkv.reshape(B, T, 3 * D))
  dws = tuple(dw[:, i * D:(i + 1) * D].astype(w.dtype)
              for i, w in enumerate(ws))
  if not biases:
    return dx, dws, ()
  db = jnp.sum(sums, axis=0)
  return dx, dws, tuple(db[i].astype(b.dtype) for i, b in enumerate(biases))


_projected.defvjp(_vjp_forward, _vjp_backward)


def projected_attention(x_BxTxd: jax.Array, kernels, temperature: float, *,
                        biases=None, causal: bool = True,
                        interpret: bool | None = None) -> jax.Array:
  r""":math:`U = \mathrm{softmax}(\mathrm{mask}(QK^\top/\lambda))V` with
  :math:`Q = xW_Q + b_Q` (K, V alike) for one head, [B, T, 1, D] in x's
  dtype; one kernel forward and one backward (module doc).

  Args:
    x_BxTxd: the attention's input [B, T, d], T <= 64.
    kernels: (W_Q, W_K, W_V), each [d, 1, D] (`SelfAttention`'s, cast to
      x's dtype).
    temperature: :math:`\lambda`.
    biases: (b_Q, b_K, b_V), each [1, D], or None.
    causal: query t sees keys j <= t.
    interpret: run in Pallas' interpreter; None: on a CPU only.
  """
  interpret = _interpret(interpret)
  B, T, d = x_BxTxd.shape
  if not attention_kernel.one_block(T):
    raise ValueError(f"fused_qkv_attention takes at most "
                     f"{attention_kernel.BLOCK} tokens, got T = {T}.")
  if any(w.ndim != 3 or w.shape[:2] != (d, 1) for w in kernels):
    raise ValueError("fused_qkv_attention takes one head: kernels [d, 1, D], "
                     f"got {[w.shape for w in kernels]}.")
  D = kernels[0].shape[2]
  ws = tuple(w.astype(x_BxTxd.dtype).reshape(d, D) for w in kernels)
  bs = tuple(b.reshape(D) for b in biases) if biases else ()
  u = _projected(x_BxTxd, ws, bs, 1.0 / temperature, causal, interpret)
  return u.reshape(B, T, 1, D)


def reference(x_BxTxd, kernels, temperature: float, *, biases=None,
              causal: bool = True) -> jax.Array:
  """The same in jnp (tests): the projections in x's dtype as the packed
  path computes them, the attention in float32."""
  dtype = x_BxTxd.dtype
  qkv = [jnp.einsum("btd,dhe->bthe", x_BxTxd, w.astype(dtype))
         for w in kernels]
  if biases:
    qkv = [t + b.astype(dtype)[None, None] for t, b in zip(qkv, biases)]
  return attention_kernel.reference(*qkv, temperature, causal=causal)
