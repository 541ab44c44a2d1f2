r"""Post-LN's residual sum, dropout and LayerNorm as one kernel (GPU, Pallas).

Shapes: N = tokens (rows), d = model width; P = row blocks.

A Post-LN block (paper Sec. 2, fairseq's default) ends each sublayer with

.. math:: z = x + m \odot (u + c),\qquad
          y = \frac{z - \mu}{\sqrt{\sigma^2 + \epsilon}}\,\gamma + \beta,
          \qquad \mu = \tfrac1d \textstyle\sum_j z_j,\quad
          \sigma^2 = \tfrac1d \textstyle\sum_j (z_j - \mu)^2

per token (x the sublayer's input, u its output before its bias c, m the
dropout mask scaled by 1/keep; without c, u is the output with its bias).
XLA runs this as three kernels forward (the sums with the
residual and dropout, the reciprocal square root, the normalisation) and
three backward, each of which does almost nothing at the paper's sizes;
the small models' steps are bound by how many kernels they launch
(bench/gpu_results.md (12)-(13)). `add_dropout_norm` is one Pallas
(Triton) kernel forward, one program per block of rows holding its rows
in registers, and one backward plus XLA's sum of the per-block
:math:`\gamma, \beta` gradients. With :math:`\hat z = (z - \mu)/\sigma`
and :math:`g = \gamma \odot dy` the backward is

.. math:: dz = \frac{1}{\sigma}\Big(g - \overline{g} - \hat z\,
          \overline{g \odot \hat z}\Big),\qquad dx = dz,\qquad
          du = m \odot dz,\qquad d\gamma = \textstyle\sum_n dy \odot \hat z,
          \qquad d\beta = \textstyle\sum_n dy,\qquad dc = \textstyle\sum_n du

(bars: means over the d columns), which tests check against autodiff.
Taking the sublayer's bias c (its projection applied without it) saves the
XLA kernel that adds it forward and the one that sums its gradient: the
kernel adds it in float32 and sums dc with gamma's and beta's block sums.
In a block y is read twice, by the residual stream and by the next
sublayer, and autodiff adds the two gradients in an XLA kernel before the
backward reads dy; with `outputs=2` y is returned as two references (the
same array, no copy) whose gradients the backward kernel adds itself,
:math:`dy = dy_1 + dy_2` in float32.

Same maths as `flax.linen.LayerNorm` after `nn.Dropout`, in float32
inside the kernel (the variance in two passes, as PyTorch's LayerNorm
computes it, where Flax's default takes E[z^2] - E[z]^2; z not rounded to
the compute dtype before the statistics): tests/norm_kernel_test.py
bounds the difference. The mask comes from `nn.Dropout` applied to ones in
float32, so the model draws the same masks as its XLA path and scales by
exactly 1/keep. On a CPU the kernels run in Pallas' interpreter; on a
TPU there is no Triton. Under a multi-device mesh the kernels are opaque
to XLA's partitioner, as `attention_kernel`'s are: the option is for one
GPU.
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from qkspec.training import pallas_common

ROWS = 64      # rows a program normalises


def row_block(n: int) -> int:
  """Rows per program: min(ROWS, N), which must divide N."""
  return pallas_common.fitting_block(
      n, ROWS, "fused_norm needs the token count (batch x sequence)")


def residual_sum(x, u, m, c_ref):
  """z = x + m (u + c) of a block of rows, float32 (x, u and the mask m
  loaded; `c_ref` None: no bias); `ffn_kernel` and `proj_norm_kernel`
  share it."""
  u = u.astype(jnp.float32)
  if c_ref is not None:
    u = u + c_ref[...][None, :]
  return x.astype(jnp.float32) + u * m


def layer_norm_rows(z, gamma, beta, eps):
  """(y, mean, rstd) of LayerNorm over the rows of z [R, d] float32 (the
  variance in two passes), inside a kernel; `ffn_kernel` and
  `proj_norm_kernel` share it."""
  mean = jnp.mean(z, axis=1)
  zc = z - mean[:, None]
  rstd = jax.lax.rsqrt(jnp.mean(zc * zc, axis=1) + eps)
  return zc * rstd[:, None] * gamma[None, :] + beta[None, :], mean, rstd


def layer_norm_rows_backward(z, mean, rstd, gamma, dy):
  """(dz, zhat) of `layer_norm_rows` (module doc), float32 [R, d]."""
  rstd = rstd[:, None]
  zhat = (z - mean[:, None]) * rstd
  g = dy * gamma[None, :]
  dz = (g - jnp.mean(g, axis=1)[:, None]
        - zhat * jnp.mean(g * zhat, axis=1)[:, None]) * rstd
  return dz, zhat


def _forward_kernel(*refs, eps):
  """`refs`: x, u, m, [c,] gamma, beta, then the outputs y, mean, rstd."""
  x_ref, u_ref, m_ref, *c_ref, g_ref, b_ref, y_ref, mean_ref, rstd_ref = refs
  z = residual_sum(x_ref[...], u_ref[...], m_ref[...].astype(jnp.float32),
                   c_ref[0] if c_ref else None)
  y, mean, rstd = layer_norm_rows(z, g_ref[...], b_ref[...], eps)
  y_ref[...] = y.astype(y_ref.dtype)
  mean_ref[...] = mean
  rstd_ref[...] = rstd


def sum_cotangents(dy_refs):
  """The outputs' cotangents (one per reference) added in float32."""
  return functools.reduce(jnp.add, [r[...].astype(jnp.float32)
                                    for r in dy_refs])


def _backward_kernel(*refs, cotangents):
  """`refs`: x, u, m, [c,] gamma, mean, rstd, the `cotangents` dy (summed),
  then the outputs dx, du and the block sums (gamma's, beta's[, c's])."""
  *refs, dx_ref, du_ref, dgb_ref = refs
  ins, dy_refs = refs[:-cotangents], refs[-cotangents:]
  x_ref, u_ref, m_ref, *c_ref, g_ref, mean_ref, rstd_ref = ins
  m = m_ref[...].astype(jnp.float32)
  z = residual_sum(x_ref[...], u_ref[...], m, c_ref[0] if c_ref else None)
  dy = sum_cotangents(dy_refs)
  dz, zhat = layer_norm_rows_backward(z, mean_ref[...], rstd_ref[...],
                                      g_ref[...], dy)
  du = dz * m
  dx_ref[...] = dz.astype(dx_ref.dtype)
  du_ref[...] = du.astype(du_ref.dtype)
  # gamma's, beta's (and c's) block sums in one array: one XLA sum for all
  dgb_ref[0, :] = jnp.sum(dy * zhat, axis=0)
  dgb_ref[1, :] = jnp.sum(dy, axis=0)
  if c_ref:
    dgb_ref[2, :] = jnp.sum(du, axis=0)


def _interpret(interpret):
  return pallas_common.interpret_mode(interpret, "fused_norm's kernels",
                                      "fused_norm=False")


def _blocks(n: int, d: int):
  """(row blocks P, and the blocks of a [N, d] tile, a [d] vector and a
  [N] per-row array) of both kernels' grids."""
  rows = row_block(n)
  return (n // rows, pl.BlockSpec((rows, d), lambda i: (i, 0)),
          pl.BlockSpec((d,), lambda i: (0,)),
          pl.BlockSpec((rows,), lambda i: (i,)))


def _forward(x_Nxd, u_Nxd, m_Nxd, c_d, scale_d, bias_d, eps, interpret):
  n, d = x_Nxd.shape
  blocks, tile, vector, per_row = _blocks(n, d)
  biased = c_d is not None
  return pl.pallas_call(
      functools.partial(_forward_kernel, eps=eps), grid=(blocks,),
      in_specs=[tile, tile, tile] + [vector] * (2 + biased),
      **forward_outputs(n, d, x_Nxd.dtype, tile, per_row),
      interpret=_interpret(interpret), name="add_dropout_norm",
  )(x_Nxd, u_Nxd, m_Nxd, *([c_d] if biased else []), scale_d, bias_d)


def forward_outputs(n: int, d: int, dtype, tile, per_row) -> dict:
  """`pallas_call`'s outputs of a LayerNorm kernel's forward: y [N, d] in
  `dtype` (blocks `tile`) and its rows' mean and rstd [N] float32 (blocks
  `per_row`), the backward's residuals; `ffn_kernel` and
  `proj_norm_kernel` share it."""
  stats = jax.ShapeDtypeStruct((n,), jnp.float32)
  return dict(out_specs=[tile, per_row, per_row],
              out_shape=[jax.ShapeDtypeStruct((n, d), dtype), stats, stats])


def references(y, outputs: int):
  """y, or `outputs` references to it (a tuple)."""
  return y if outputs == 1 else (y,) * outputs


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8))
def _add_dropout_norm(x_Nxd, u_Nxd, m_Nxd, c_d, scale_d, bias_d, eps,
                      interpret, outputs):
  return references(_forward(x_Nxd, u_Nxd, m_Nxd, c_d, scale_d, bias_d,
                              eps, interpret)[0], outputs)


def _vjp_forward(x_Nxd, u_Nxd, m_Nxd, c_d, scale_d, bias_d, eps, interpret,
                 outputs):
  y, mean, rstd = _forward(x_Nxd, u_Nxd, m_Nxd, c_d, scale_d, bias_d, eps,
                           interpret)
  return (references(y, outputs),
          (x_Nxd, u_Nxd, m_Nxd, c_d, scale_d, mean, rstd))


def _vjp_backward(eps, interpret, outputs, residuals, dy):
  del eps
  dys = dy if outputs > 1 else (dy,)
  x_Nxd, u_Nxd, m_Nxd, c_d, scale_d, mean, rstd = residuals
  n, d = x_Nxd.shape
  blocks, tile, vector, per_row = _blocks(n, d)
  biased = c_d is not None
  sums = 2 + biased
  per_block = pl.BlockSpec((None, sums, d), lambda i: (i, 0, 0))
  dx, du, dgb_PxSxd = pl.pallas_call(
      functools.partial(_backward_kernel, cotangents=len(dys)),
      grid=(blocks,),
      in_specs=[tile, tile, tile] + [vector] * (1 + biased)
      + [per_row, per_row] + [tile] * len(dys),
      out_specs=[tile, tile, per_block],
      out_shape=[jax.ShapeDtypeStruct((n, d), x_Nxd.dtype),
                 jax.ShapeDtypeStruct((n, d), u_Nxd.dtype),
                 jax.ShapeDtypeStruct((blocks, sums, d), jnp.float32)],
      interpret=_interpret(interpret), name="add_dropout_norm_backward",
  )(x_Nxd, u_Nxd, m_Nxd, *([c_d] if biased else []), scale_d, mean, rstd,
    *dys)
  dgb_Sxd = jnp.sum(dgb_PxSxd, axis=0).astype(scale_d.dtype)
  dc = dgb_Sxd[2].astype(c_d.dtype) if biased else None
  return dx, du, None, dc, dgb_Sxd[0], dgb_Sxd[1]


_add_dropout_norm.defvjp(_vjp_forward, _vjp_backward)


def add_dropout_norm(x: jax.Array, u: jax.Array, mask: jax.Array,
                     scale: jax.Array, bias: jax.Array, *,
                     u_bias: jax.Array | None = None, eps: float = 1e-5,
                     outputs: int = 1, interpret: bool | None = None):
  r"""LayerNorm(x + mask * (u + u_bias)) over the last axis, in x's dtype
  (module doc); with `outputs=2`, a tuple of two references to it, whose
  gradients the backward kernel adds (for a y read by two consumers).

  Args:
    x, u: [..., d], the sublayer's input and output.
    mask: [..., d], the dropout mask scaled by 1/keep (ones without
      dropout); no gradient flows to it.
    scale, bias: [d], :math:`\gamma` and :math:`\beta` (float32).
    u_bias: [d], c, the bias of the projection that gave `u`, added here
      (in float32) rather than by it; None: `u` has its bias.
    eps: added to the variance.
    outputs: 1 (y) or 2 ((y, y)).
    interpret: run in Pallas' interpreter; None: on a CPU only.
  """
  if outputs not in (1, 2):
    raise ValueError(f"outputs must be 1 or 2, got {outputs!r}.")
  d = x.shape[-1]
  flat = lambda a: a.reshape(-1, d)  # noqa: E731
  y = _add_dropout_norm(flat(x), flat(u), flat(mask), u_bias, scale, bias,
                        eps, interpret, outputs)
  return jax.tree.map(lambda a: a.reshape(x.shape), y)


def reference(x, u, mask, scale, bias, *, u_bias=None,
              eps: float = 1e-5) -> jax.Array:
  """The same in float32 jnp, differentiable by autodiff (tests)."""
  row = lambda v: v.reshape((1,) * (x.ndim - 1) + (-1,))  # noqa: E731
  u = u.astype(jnp.float32) + (0.0 if u_bias is None else row(u_bias))
  z = x.astype(jnp.float32) + u * mask.astype(jnp.float32)
  zc = z - jnp.mean(z, axis=-1, keepdims=True)
  var = jnp.mean(zc * zc, axis=-1, keepdims=True)
  return zc * jax.lax.rsqrt(var + eps) * row(scale) + row(bias)
