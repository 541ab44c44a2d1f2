r"""The attention's output projection with Post-LN's residual sum, dropout
and LayerNorm as one kernel (GPU, Pallas/Triton).

Shapes: N = tokens (rows), d = model width = HD (heads x head width, as
the LM's attention has it); P = row blocks.

A Post-LN block's attention sublayer ends with

.. math:: v = U W_O,\qquad y = \mathrm{LN}\big(x + m \odot (v + c)\big)

(U the heads' outputs side by side, :math:`W_O` the output projection,
c its bias, x the block's input, m the dropout mask scaled by 1/keep).
With `norm_kernel` the LayerNorm part is one kernel each way and the
projection XLA's matmul: forward two kernels, backward the norm's, the
projection's input gradient (:math:`dU = dv\,W_O^\top`) and weight
gradient. `proj_norm` computes v inside the norm's kernel forward, and
backward recomputes v and returns dU from the same kernel, with
:math:`dv = m \odot dz` for the weight gradient :math:`U^\top dv` (XLA's
matmul over all rows, as `ffn_kernel` leaves its weight gradients) and
the block's sums of dc, :math:`d\gamma, d\beta` for one XLA reduction:
1 kernel forward and 3 backward instead of 2 and 4 (the weight
gradient's split-K reduction, if XLA chooses one, either way).

Same roundings as the XLA path under a half-precision compute dtype (v,
dv and dU rounded to it where its matmuls round their outputs; the rest
in float32 as `norm_kernel`); tests/proj_norm_kernel_test.py checks the
values and gradients against `reference` (autodiff) in float32 and
bfloat16. On a CPU the kernels run in Pallas' interpreter; on a TPU there
is no Triton; one GPU only, as `norm_kernel`'s.
"""
import functools

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp

from qkspec.training import ffn_kernel
from qkspec.training import norm_kernel
from qkspec.training import pallas_common


def _interpret(interpret):
  return pallas_common.interpret_mode(interpret, "fused_out_proj's kernels",
                                      "fused_out_proj=False")


def _forward_kernel(*refs, eps):
  """`refs`: x, u, m, w, [c,] gamma, beta, then the outputs y, mean,
  rstd."""
  x_ref, u_ref, m_ref, w_ref, *c_ref, g_ref, b_ref, y_ref, mean_ref, \
      rstd_ref = refs
  x = x_ref[...]
  v = plgpu.dot(u_ref[...], w_ref[...]).astype(x.dtype)
  z = norm_kernel.residual_sum(x, v, m_ref[...].astype(jnp.float32),
                               c_ref[0] if c_ref else None)
  y, mean, rstd = norm_kernel.layer_norm_rows(z, g_ref[...], b_ref[...], eps)
  y_ref[...] = y.astype(y_ref.dtype)
  mean_ref[...] = mean
  rstd_ref[...] = rstd


def _backward_kernel(*refs, biased, cotangents):
  """`refs`: x, u, m, w, [c,] gamma, mean, rstd, the `cotangents` dy, then
  the outputs dx, dU, dv (in x's dtype) and the block's sums [3, d] of dc,
  dgamma, dbeta."""
  x_ref, u_ref, m_ref, w_ref = refs[:4]
  c_ref = refs[4] if biased else None
  g_ref, mean_ref, rstd_ref = refs[4 + biased:7 + biased]
  dy_refs = refs[7 + biased:7 + biased + cotangents]
  dx_ref, du_ref, dv_ref, sums_ref = refs[7 + biased + cotangents:]
  x, u, w = x_ref[...], u_ref[...], w_ref[...]
  m = m_ref[...].astype(jnp.float32)
  v = plgpu.dot(u, w).astype(x.dtype)
  z = norm_kernel.residual_sum(x, v, m, c_ref)
  dy = norm_kernel.sum_cotangents(dy_refs)
  dz, zhat = norm_kernel.layer_norm_rows_backward(
      z, mean_ref[...], rstd_ref[...], g_ref[...], dy)
  dv = dz * m
  dv_c = dv.astype(x.dtype)               # the projection's cotangent
  dx_ref[...] = dz.astype(dx_ref.dtype)
  du_ref[...] = plgpu.dot(dv_c, w.T).astype(du_ref.dtype)
  dv_ref[...] = dv_c
  sums_ref[0, :] = jnp.sum(dv, axis=0)
  sums_ref[1, :] = jnp.sum(dy * zhat, axis=0)
  sums_ref[2, :] = jnp.sum(dy, axis=0)


def _forward(x, u, m, w, c, scale, bias, eps, interpret):
  n, d = x.shape
  blocks, tile, weight, vector, per_row = ffn_kernel.row_specs(
      n, d, option="fused_out_proj")
  biased = c is not None
  return pl.pallas_call(
      functools.partial(_forward_kernel, eps=eps), grid=(blocks,),
      in_specs=[tile, tile, tile, weight] + [vector] * (2 + biased),
      **norm_kernel.forward_outputs(n, d, x.dtype, tile, per_row),
      compiler_params=pallas_common.layer_params(d),
      interpret=_interpret(interpret), name="proj_norm",
  )(x, u, m, w, *([c] if biased else []), scale, bias)


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9))
def _proj_norm(x, u, m, w, c, scale, bias, eps, interpret, outputs):
  return norm_kernel.references(
      _forward(x, u, m, w, c, scale, bias, eps, interpret)[0], outputs)


def _vjp_forward(x, u, m, w, c, scale, bias, eps, interpret, outputs):
  y, mean, rstd = _forward(x, u, m, w, c, scale, bias, eps, interpret)
  return norm_kernel.references(y, outputs), (x, u, m, w, c, scale, mean,
                                              rstd)


def _vjp_backward(eps, interpret, outputs, residuals, dy):
  del eps
  dys = dy if outputs > 1 else (dy,)
  x, u, m, w, c, scale, mean, rstd = residuals
  n, d = x.shape
  blocks, tile, weight, vector, per_row = ffn_kernel.row_specs(
      n, d, ffn_kernel.backward_rows(d), option="fused_out_proj")
  biased = c is not None
  tile_of = jax.ShapeDtypeStruct((n, d), x.dtype)
  dx, du, dv, sums_Px3xd = pl.pallas_call(
      functools.partial(_backward_kernel, biased=biased,
                        cotangents=len(dys)),
      grid=(blocks,),
      in_specs=[tile, tile, tile, weight] + [vector] * (1 + biased)
      + [per_row, per_row] + [tile] * len(dys),
      out_specs=[tile] * 3 + [pl.BlockSpec((None, 3, d),
                                           lambda i: (i, 0, 0))],
      out_shape=[tile_of] * 3
      + [jax.ShapeDtypeStruct((blocks, 3, d), jnp.float32)],
      compiler_params=pallas_common.layer_params(d),
      interpret=_interpret(interpret), name="proj_norm_backward",
  )(x, u, m, w, *([c] if biased else []), scale, mean, rstd, *dys)
  dw = jnp.dot(u.T, dv).astype(w.dtype)      # the XLA path's matmul
  total = jnp.sum(sums_Px3xd, axis=0)        # one XLA reduction
  dc = total[0].astype(c.dtype) if biased else None
  return (dx, du, None, dw, dc,
          total[1].astype(scale.dtype), total[2])


_proj_norm.defvjp(_vjp_forward, _vjp_backward)


def proj_norm(x: jax.Array, u: jax.Array, mask: jax.Array, w: jax.Array,
              c: jax.Array | None, scale: jax.Array, bias: jax.Array, *,
              eps: float = 1e-5, outputs: int = 1,
              interpret: bool | None = None):
  r"""LayerNorm(x + mask * (u W + c)) over the last axis, in x's dtype
  (module doc); `outputs=2`: a tuple of two references to it, whose
  gradients the backward kernel adds (`norm_kernel.add_dropout_norm`'s).

  Args:
    x: [..., d], the residual, in the compute dtype.
    u: [..., d], the heads' outputs side by side (HD = d), in x's dtype.
    mask: [..., d], the dropout mask scaled by 1/keep; no gradient.
    w: [d, d], the output projection (cast to x's dtype).
    c: [d] float32, its bias, or None.
    scale, bias: [d], the LayerNorm's :math:`\gamma, \beta` (float32).
    eps: added to the variance.
    outputs: 1 (y) or 2 ((y, y)).
    interpret: run in Pallas' interpreter; None: on a CPU only.
  """
  d = x.shape[-1]
  if outputs not in (1, 2):
    raise ValueError(f"outputs must be 1 or 2, got {outputs!r}.")
  if u.shape != x.shape or w.shape != (d, d):
    raise ValueError(f"fused_out_proj needs the heads' width equal to d = "
                     f"{d} (u like x, {x.shape}, and W [{d}, {d}]), got u "
                     f"{u.shape} and W {w.shape}.")
  flat = lambda a: a.reshape(-1, d)  # noqa: E731
  y = _proj_norm(flat(x), flat(u).astype(x.dtype), flat(mask),
                 w.astype(x.dtype), c, scale, bias, eps, interpret, outputs)
  return jax.tree.map(lambda a: a.reshape(x.shape), y)


def reference(x, u, mask, w, c, scale, bias, *, eps: float = 1e-5):
  """The same in jnp, differentiable by autodiff (tests): the projection
  in x's dtype as the model's XLA path computes it, the rest in float32."""
  v = jnp.dot(u.astype(x.dtype), w.astype(x.dtype))
  return norm_kernel.reference(x, v, mask, scale, bias, u_bias=c, eps=eps)
