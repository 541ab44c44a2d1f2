r"""Post-LN's FFN sublayer with its residual sum, dropout and LayerNorm as
one kernel (GPU, Pallas/Triton).

Shapes: N = tokens (rows), d = model width = F, the FFN's width (the
paper's models); P = row blocks.

A Post-LN block (paper Sec. 2) ends with

.. math:: a = x W_1 + b_1,\qquad u = \mathrm{relu}(a)\,W_2,\qquad
          y = \mathrm{LN}\big(x + m \odot (u + c)\big)

(x the attention sublayer's normalised output, m the dropout mask scaled
by 1/keep, c = :math:`b_2`). With `norm_kernel` the LayerNorm part is
already one kernel each way; the FFN around it is still XLA's: forward
the two matmuls and the bias add (the ReLU fused into the second
matmul), backward the input gradient's two matmuls, the ReLU's select,
both weight gradients and :math:`b_1`'s sum, and the norm kernel's
per-block sums: nine kernels a layer that each do almost nothing at the
paper's sizes (N = 4,096 tokens a member, d = F = 32 or 128), in steps
bound by how many kernels they launch (bench/gpu_results.md (12), (19):
~7 us a kernel on an H200, which CUDA graphs do not remove).

`ffn_norm` computes the same as one kernel forward, one per block of
rows (its tiles of x, a, u, z held in registers; :math:`W_1, W_2`, each
d x d, read by every program), and one backward that recomputes a and u
from x and then, with :math:`(dz, \hat z)` from `norm_kernel`'s
LayerNorm backward and :math:`du = m \odot dz`,

.. math:: da = (du\,W_2^\top) \odot [a > 0],\qquad
          dx_{\mathrm{ffn}} = da\,W_1^\top,

and the block's sums of :math:`db_1 = \sum da`, :math:`dc = \sum du`,
:math:`d\gamma = \sum dy \odot \hat z`, :math:`d\beta = \sum dy` in one
[P, 4, d] float32 array, which one XLA reduction sums. The weight
gradients :math:`dW_1 = x^\top da` and :math:`dW_2 = \mathrm{relu}(a)^\top
du` are XLA's matmuls over all rows of the kernel's da, relu(a) and du:
summing them in the kernel (per-block [d, d] products, then XLA's sum)
needed more than 255 registers a thread at d = 128 (ptxas spilled ~1.2 KB
a thread, deviceless) and wrote 42 MB of partial sums a layer. So a
layer's FFN and its norm launch 1 kernel forward and 4 backward instead
of 4 and 8.

Same roundings as the XLA path under a half-precision compute dtype: a,
the ReLU's output, u and the cotangents du and :math:`du\,W_2^\top` are
rounded to it where the XLA path's matmuls round their outputs; the
weight gradients are the XLA path's matmuls; :math:`db_1` is summed in
float32 over the blocks and rounded once, as XLA's reduction over all
rows rounds once (the order of the float32 sums differs). The residual's
cotangent and the FFN input's are returned apart (x arrives as the two
references of `norm_kernel`'s `outputs=2`, whose kernel adds them), as in
the XLA path.
tests/ffn_kernel_test.py checks the values and gradients against
`reference` (autodiff) in float32 and bfloat16.

On a CPU the kernels run in Pallas' interpreter; on a TPU there is no
Triton; under a multi-device mesh the kernels are opaque to XLA's
partitioner: the option is for one GPU, as `norm_kernel`'s.
"""
import functools

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp

from qkspec.training import norm_kernel
from qkspec.training import pallas_common

ROWS = 64      # rows a program takes (the backward at d > 64: half)


def _interpret(interpret):
  return pallas_common.interpret_mode(interpret, "fused_ffn's kernels",
                                      "fused_ffn=False")


def _ffn(x, w1, b1_ref, w2):
  """(a, relu(a), u) of a block of rows x [R, d] in the compute dtype (x's),
  each rounded to it as the XLA path's matmul outputs and bias add are;
  `b1_ref` None: no bias."""
  dtype = x.dtype
  a = pallas_common.with_bias(plgpu.dot(x, w1).astype(dtype), b1_ref, dtype)
  h = jnp.maximum(a, jnp.zeros_like(a))
  return a, h, plgpu.dot(h, w2).astype(dtype)


def _split(refs, biased):
  """(x, m, w1, b1 or None, w2, c or None, gamma) refs, the rest."""
  if biased:
    x, m, w1, b1, w2, c, gamma, *rest = refs
  else:
    (x, m, w1, w2, gamma, *rest), b1, c = refs, None, None
  return (x, m, w1, b1, w2, c, gamma), rest


def _forward_kernel(*refs, eps, biased):
  """`refs`: x, m, w1, [b1,] w2, [c,] gamma, beta, then the outputs y,
  mean, rstd."""
  (x_ref, m_ref, w1_ref, b1_ref, w2_ref, c_ref, g_ref), rest = _split(
      refs, biased)
  beta_ref, y_ref, mean_ref, rstd_ref = rest
  x = x_ref[...]
  _, _, u = _ffn(x, w1_ref[...], b1_ref, w2_ref[...])
  z = norm_kernel.residual_sum(x, u, m_ref[...].astype(jnp.float32), c_ref)
  y, mean, rstd = norm_kernel.layer_norm_rows(z, g_ref[...], beta_ref[...],
                                              eps)
  y_ref[...] = y.astype(y_ref.dtype)
  mean_ref[...] = mean
  rstd_ref[...] = rstd


def _backward_kernel(*refs, biased, cotangents):
  """`refs`: x, m, w1, [b1,] w2, [c,] gamma, mean, rstd, the `cotangents`
  dy, then the outputs dx (the residual's), dx (the FFN input's), da,
  relu(a), du (the weight gradients' operands, in x's dtype) and the
  block's sums [4, d] of db1, dc, dgamma, dbeta."""
  (x_ref, m_ref, w1_ref, b1_ref, w2_ref, c_ref, g_ref), rest = _split(
      refs, biased)
  mean_ref, rstd_ref, *rest = rest
  dy_refs = rest[:cotangents]
  dres_ref, din_ref, da_ref, h_ref, du_ref, sums_ref = rest[cotangents:]
  x, w1, w2 = x_ref[...], w1_ref[...], w2_ref[...]
  dtype = x.dtype
  m = m_ref[...].astype(jnp.float32)
  a, h, u = _ffn(x, w1, b1_ref, w2)
  z = norm_kernel.residual_sum(x, u, m, c_ref)
  dy = norm_kernel.sum_cotangents(dy_refs)
  dz, zhat = norm_kernel.layer_norm_rows_backward(
      z, mean_ref[...], rstd_ref[...], g_ref[...], dy)
  du = dz * m
  du_c = du.astype(dtype)                 # the second matmul's cotangent
  dh = plgpu.dot(du_c, w2.T).astype(dtype)
  da = jnp.where(a > 0, dh, jnp.zeros_like(dh))
  dres_ref[...] = dz.astype(dres_ref.dtype)
  din_ref[...] = plgpu.dot(da, w1.T).astype(din_ref.dtype)
  da_ref[...] = da
  h_ref[...] = h
  du_ref[...] = du_c
  sums_ref[0, :] = jnp.sum(da.astype(jnp.float32), axis=0)
  sums_ref[1, :] = jnp.sum(du, axis=0)
  sums_ref[2, :] = jnp.sum(dy * zhat, axis=0)
  sums_ref[3, :] = jnp.sum(dy, axis=0)


def row_specs(n: int, d: int, most: int = ROWS,
              option: str = "fused_ffn"):
  """(row blocks P, and the blocks of a [N, d] tile, a [d, d] weight, a
  [d] vector and a [N] per-row array), at most `most` rows a block
  (`option` names the config option in the error when they do not fit)."""
  rows = pallas_common.fitting_block(
      n, most, f"{option} needs the token count (batch x sequence)")
  return (n // rows, pl.BlockSpec((rows, d), lambda i: (i, 0)),
          pl.BlockSpec((d, d), lambda i: (0, 0)),
          pl.BlockSpec((d,), lambda i: (0,)),
          pl.BlockSpec((rows,), lambda i: (i,)))


def backward_rows(d: int) -> int:
  """Rows a backward program takes: ROWS, half of it at d > 64 (at d = 128
  64 rows needed more than 255 registers a thread: ptxas spilled ~1 KB a
  thread, bench/deviceless.py; 32 do not)."""
  return ROWS if d <= 64 else ROWS // 2


def _weights(w1, b1, w2, c):
  """The weight operands in the kernels' order, biases present or not."""
  return [w1] + ([b1] if b1 is not None else []) + [w2] + (
      [c] if c is not None else [])


def _forward(x, m, w1, b1, w2, c, scale, bias, eps, interpret):
  n, d = x.shape
  blocks, tile, weight, vector, per_row = row_specs(n, d)
  biased = b1 is not None
  return pl.pallas_call(
      functools.partial(_forward_kernel, eps=eps, biased=biased),
      grid=(blocks,),
      in_specs=[tile, tile, weight] + [vector] * biased + [weight]
      + [vector] * biased + [vector, vector],
      **norm_kernel.forward_outputs(n, d, x.dtype, tile, per_row),
      compiler_params=pallas_common.layer_params(d),
      interpret=_interpret(interpret), name="ffn_norm",
  )(x, m, *_weights(w1, b1, w2, c), scale, bias)


@functools.partial(jax.custom_vjp, nondiff_argnums=(9, 10, 11))
def _ffn_norm(x_res, x_in, m, w1, b1, w2, c, scale, bias, eps, interpret,
              outputs):
  del x_res
  return norm_kernel.references(_forward(x_in, m, w1, b1, w2, c, scale,
                                        bias, eps, interpret)[0], outputs)


def _vjp_forward(x_res, x_in, m, w1, b1, w2, c, scale, bias, eps, interpret,
                 outputs):
  del x_res
  y, mean, rstd = _forward(x_in, m, w1, b1, w2, c, scale, bias, eps,
                           interpret)
  return norm_kernel.references(y, outputs), (x_in, m, w1, b1, w2, c, scale,
                                              mean, rstd)


def _vjp_backward(eps, interpret, outputs, residuals, dy):
  del eps
  dys = dy if outputs > 1 else (dy,)
  x, m, w1, b1, w2, c, scale, mean, rstd = residuals
  n, d = x.shape
  blocks, tile, weight, vector, per_row = row_specs(n, d, backward_rows(d))
  biased = b1 is not None
  sums = pl.BlockSpec((None, 4, d), lambda i: (i, 0, 0))
  tile_of = jax.ShapeDtypeStruct((n, d), x.dtype)
  dres, din, da, h, du, sums_Px4xd = pl.pallas_call(
      functools.partial(_backward_kernel, biased=biased,
                        cotangents=len(dys)),
      grid=(blocks,),
      in_specs=[tile, tile, weight] + [vector] * biased + [weight]
      + [vector] * biased + [vector, per_row, per_row] + [tile] * len(dys),
      out_specs=[tile] * 5 + [sums],
      out_shape=[tile_of] * 5
      + [jax.ShapeDtypeStruct((blocks, 4, d), jnp.float32)],
      compiler_params=pallas_common.layer_params(d),
      interpret=_interpret(interpret), name="ffn_norm_backward",
  )(x, m, *_weights(w1, b1, w2, c), scale, mean, rstd, *dys)
  # the weight gradients as the XLA path's matmuls compute them, over all
  # rows in x's dtype. Not as one batched matmul of stacked operands: on
  # an H100 XLA then splits its K and lays the gradients out transposed,
  # copying both weights' AdamW states every step (deviceless: Fig. 6's
  # step 68 kernels, 4 of them copies, against 61)
  dw1 = jnp.dot(x.T, da).astype(w1.dtype)
  dw2 = jnp.dot(h.T, du).astype(w2.dtype)
  total = jnp.sum(sums_Px4xd, axis=0)                # one XLA reduction
  db1 = total[0].astype(x.dtype).astype(b1.dtype) if biased else None
  dc = total[1].astype(c.dtype) if biased else None
  return (dres, din, None, dw1, db1, dw2, dc, total[2].astype(scale.dtype),
          total[3])


_ffn_norm.defvjp(_vjp_forward, _vjp_backward)


def ffn_norm(x: jax.Array | tuple[jax.Array, jax.Array], mask: jax.Array,
             w1: jax.Array, b1: jax.Array | None, w2: jax.Array,
             c: jax.Array | None, scale: jax.Array, bias: jax.Array, *,
             eps: float = 1e-5, outputs: int = 1,
             interpret: bool | None = None):
  r"""LayerNorm(x + mask * (relu(x W1 + b1) W2 + c)) over the last axis, in
  x's dtype (module doc); `outputs=2`: a tuple of two references to it
  (`norm_kernel.add_dropout_norm`'s).

  Args:
    x: [..., d] in the compute dtype, or the pair of references (residual,
      FFN input) of `add_dropout_norm(..., outputs=2)`: their gradients
      are returned apart.
    mask: [..., d], the dropout mask scaled by 1/keep; no gradient.
    w1, w2: [d, d] in x's dtype (F = d).
    b1, c: [d] float32, the FFN's biases (both or neither: None).
    scale, bias: [d], the LayerNorm's :math:`\gamma, \beta` (float32).
    eps: added to the variance.
    outputs: 1 (y) or 2 ((y, y)).
    interpret: run in Pallas' interpreter; None: on a CPU only.
  """
  x_res, x_in = x if isinstance(x, tuple) else (x, x)
  d = x_in.shape[-1]
  if outputs not in (1, 2):
    raise ValueError(f"outputs must be 1 or 2, got {outputs!r}.")
  if w1.shape != (d, d) or w2.shape != (d, d):
    raise ValueError(f"fused_ffn needs the FFN's width equal to d = {d} "
                     f"(W1 and W2 [{d}, {d}]), got {w1.shape} and "
                     f"{w2.shape}.")
  if (b1 is None) != (c is None):
    raise ValueError("fused_ffn takes both FFN biases or neither.")
  flat = lambda a: a.reshape(-1, d)  # noqa: E731
  y = _ffn_norm(flat(x_res), flat(x_in), flat(mask), w1.astype(x_in.dtype),
                b1, w2.astype(x_in.dtype), c, scale, bias, eps, interpret,
                outputs)
  return jax.tree.map(lambda a: a.reshape(x_in.shape), y)


def reference(x, mask, w1, b1, w2, c, scale, bias, *, eps: float = 1e-5):
  """The same in jnp, differentiable by autodiff (tests): the FFN in x's
  dtype as the model's XLA path computes it, the rest in float32."""
  dtype = x.dtype
  a = jnp.dot(x, w1.astype(dtype))
  if b1 is not None:
    a = a + b1.astype(dtype).reshape((1,) * (x.ndim - 1) + (-1,))
  u = jnp.dot(jax.nn.relu(a), w2.astype(dtype))
  return norm_kernel.reference(x, u, mask, scale, bias, u_bias=c, eps=eps)
