r"""Post-LN's residual sum, dropout and LayerNorm as one Pallas kernel each way.

Shapes: N = tokens (rows), d = model width; P = row blocks.

Each Post-LN sublayer (paper Sec. 2, fairseq's default) ends with

.. math:: z = x + m \odot u,\qquad
          y = \frac{z - \mu}{\sqrt{\sigma^2 + \epsilon}}\,\gamma + \beta

(u the sublayer's output, m the dropout mask scaled by 1/keep): three XLA
kernels forward and about five backward on a GPU, one each here. The
backward uses the saved mean and reciprocal deviation,

.. math:: dz = \big(g - \overline{g} - \hat z\,\overline{g \hat z}\big)
          /\sqrt{\sigma^2+\epsilon},\quad g = dy \odot \gamma,\qquad
          dx = dz,\quad du = m \odot dz.

Same maths as `flax.linen.LayerNorm` after `nn.Dropout`, with the variance
in two passes (as PyTorch), which `post_ln_reference` computes in float32
jnp. On a CPU the kernels run in Pallas' interpreter (tests).
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from qkspec.kernels import _pallas

ROWS = 64      # rows a program normalises


def post_ln_reference(x, u, mask, scale, bias, *, eps: float = 1e-5
                      ) -> jax.Array:
  """`post_ln` in float32 jnp."""
  z = x.astype(jnp.float32) + u.astype(jnp.float32) * mask
  zc = z - jnp.mean(z, axis=-1, keepdims=True)
  var = jnp.mean(zc * zc, axis=-1, keepdims=True)
  row = lambda v: v.reshape((1,) * (x.ndim - 1) + (-1,))  # noqa: E731
  return zc * jax.lax.rsqrt(var + eps) * row(scale) + row(bias)


def _stats(x_ref, u_ref, m_ref):
  """z = x + m u of a block of rows in float32, and the mask."""
  m = m_ref[...].astype(jnp.float32)
  return x_ref[...].astype(jnp.float32) + u_ref[...].astype(jnp.float32) * m, m


def _forward_kernel(x_ref, u_ref, m_ref, g_ref, b_ref, y_ref, mean_ref,
                    rstd_ref, *, eps):
  z, _ = _stats(x_ref, u_ref, m_ref)
  mean = jnp.mean(z, axis=1)
  zc = z - mean[:, None]
  rstd = jax.lax.rsqrt(jnp.mean(zc * zc, axis=1) + eps)
  y = zc * rstd[:, None] * g_ref[...][None, :] + b_ref[...][None, :]
  y_ref[...] = y.astype(y_ref.dtype)
  mean_ref[...] = mean
  rstd_ref[...] = rstd


def _backward_kernel(x_ref, u_ref, m_ref, g_ref, mean_ref, rstd_ref, dy_ref,
                     dx_ref, du_ref, dgb_ref):
  z, m = _stats(x_ref, u_ref, m_ref)
  rstd = rstd_ref[...][:, None]
  zhat = (z - mean_ref[...][:, None]) * rstd
  dy = dy_ref[...].astype(jnp.float32)
  g = dy * g_ref[...][None, :]
  dz = (g - jnp.mean(g, axis=1)[:, None]
        - zhat * jnp.mean(g * zhat, axis=1)[:, None]) * rstd
  dx_ref[...] = dz.astype(dx_ref.dtype)
  du_ref[...] = (dz * m).astype(du_ref.dtype)
  dgb_ref[0, :] = jnp.sum(dy * zhat, axis=0)     # gamma's block sum
  dgb_ref[1, :] = jnp.sum(dy, axis=0)            # beta's


def _blocks(n: int, d: int):
  """(row blocks P, and the blocks of a [N, d] tile, a [d] vector and a
  [N] per-row array)."""
  rows = _pallas.fitting_block(n, ROWS, "model.kernels='pallas' needs the "
                               "token count (batch x sequence)")
  return (n // rows, pl.BlockSpec((rows, d), lambda i: (i, 0)),
          pl.BlockSpec((d,), lambda i: (0,)),
          pl.BlockSpec((rows,), lambda i: (i,)))


def _forward(x, u, m, scale, bias, eps):
  n, d = x.shape
  blocks, tile, vector, per_row = _blocks(n, d)
  stats = jax.ShapeDtypeStruct((n,), jnp.float32)
  return pl.pallas_call(
      functools.partial(_forward_kernel, eps=eps), grid=(blocks,),
      in_specs=[tile, tile, tile, vector, vector],
      out_specs=[tile, per_row, per_row],
      out_shape=[jax.ShapeDtypeStruct((n, d), x.dtype), stats, stats],
      interpret=_pallas.interpret(), name="add_dropout_norm",
  )(x, u, m, scale, bias)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _add_dropout_norm(x, u, m, scale, bias, eps):
  return _forward(x, u, m, scale, bias, eps)[0]


def _vjp_forward(x, u, m, scale, bias, eps):
  y, mean, rstd = _forward(x, u, m, scale, bias, eps)
  return y, (x, u, m, scale, mean, rstd)


def _vjp_backward(eps, residuals, dy):
  del eps
  x, u, m, scale, mean, rstd = residuals
  n, d = x.shape
  blocks, tile, vector, per_row = _blocks(n, d)
  dx, du, dgb_Px2xd = pl.pallas_call(
      _backward_kernel, grid=(blocks,),
      in_specs=[tile, tile, tile, vector, per_row, per_row, tile],
      out_specs=[tile, tile,
                 pl.BlockSpec((None, 2, d), lambda i: (i, 0, 0))],
      out_shape=[jax.ShapeDtypeStruct((n, d), x.dtype),
                 jax.ShapeDtypeStruct((n, d), u.dtype),
                 jax.ShapeDtypeStruct((blocks, 2, d), jnp.float32)],
      interpret=_pallas.interpret(), name="add_dropout_norm_backward",
  )(x, u, m, scale, mean, rstd, dy)
  dgb_2xd = jnp.sum(dgb_Px2xd, axis=0).astype(scale.dtype)
  return dx, du, None, dgb_2xd[0], dgb_2xd[1]


_add_dropout_norm.defvjp(_vjp_forward, _vjp_backward)


def post_ln(x: jax.Array, u: jax.Array, mask: jax.Array, scale: jax.Array,
            bias: jax.Array, *, eps: float = 1e-5) -> jax.Array:
  r""":math:`\mathrm{LayerNorm}(x + m \odot u)` over the last axis, in x's
  dtype (module doc): x, u [..., d] a sublayer's input and output, `mask`
  [..., d] the dropout mask scaled by 1/keep (no gradient), `scale`,
  `bias` [d] the LayerNorm's :math:`\gamma, \beta`.
  """
  d = x.shape[-1]
  flat = lambda a: a.reshape(-1, d)  # noqa: E731
  y = _add_dropout_norm(flat(x), flat(u), flat(mask), scale, bias, eps)
  return y.reshape(x.shape)
