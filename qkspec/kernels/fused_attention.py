r"""Causal self-attention as one Pallas (Triton) kernel each way.

Shapes: B = batch, T = tokens, H = heads, D = head width.

Per head (paper Eqs. 1-2), from the packed QKV projection [B, T, 3, H, D]
and its biases:

.. math:: A = \mathrm{softmax}_j\big(\mathrm{mask}(QK^\top/\lambda)\big),
          \qquad U = A V.

XLA launches a dozen small kernels for this each way at the paper's T =
64. For T <= `BLOCK` `attention` computes a (sequence, head) in one
program, softmax in float32, keeping its log-sum-exp; the backward
recomputes the probabilities and writes dQ, dK, dV in the packed layout
with the biases' sums:

.. math:: dV = P^\top dU,\quad dS = P\odot(dP - \mathrm{rowsum}(P\odot dP))
          /\lambda,\quad dQ = dS\,K,\quad dK = dS^\top Q,\qquad dP = dU V^\top.

T > `BLOCK` is refused (`config.schema` says so first). No logits or
probabilities come out to be sown: the model measures through its XLA
path. On a CPU the kernels run in Pallas' interpreter (tests);
`attention_reference` is the same maths in float32 jnp.
"""
# pylint: disable=invalid-name
import functools

import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp

from qkspec.kernels import _pallas

BLOCK = 64     # query and key block: T = 64 (the paper's) is one of each


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


def _compiler_params(width: int):
  """Triton's launch for tiles `width` wide: 8 warps past 64."""
  return plgpu.CompilerParams(num_warps=4 if width <= 64 else 8,
                              num_stages=1)


def _logits(q, k, scale, causal):
  """s q k^T in float32 [T, T], -inf where the mask hides a key."""
  s = plgpu.dot(q, k.T) * scale
  if causal:
    t = s.shape[0]
    rows = jax.lax.broadcasted_iota(jnp.int32, (t, t), 0)
    cols = jax.lax.broadcasted_iota(jnp.int32, (t, t), 1)
    s = jnp.where(rows >= cols, s, -jnp.inf)
  return s


def _tiles(qkv_ref, bias_refs, dtype):
  """q, k, v [T, D] of a (sequence, head); with biases, each plus its bias
  (rounded to `dtype` first, as XLA adds it) in `dtype`."""
  tiles = [qkv_ref[:, i, :] for i in range(3)]
  if not bias_refs:
    return tiles
  return [(t.astype(jnp.float32)
           + b[...].astype(dtype).astype(jnp.float32)[None, :]).astype(dtype)
          for t, b in zip(tiles, bias_refs)]


def _forward_kernel(qkv_ref, *refs, scale, causal):
  """`refs`: [the three biases,] then the outputs u [T, D], lse [T]."""
  *bias_refs, u_ref, lse_ref = refs
  q, k, v = _tiles(qkv_ref, bias_refs, u_ref.dtype)
  s = _logits(q, k, scale, causal)
  m = jnp.max(s, axis=1)
  p = jnp.exp(s - m[:, None])
  l = jnp.sum(p, axis=1)
  u_ref[...] = (plgpu.dot(p.astype(v.dtype), v) / l[:, None]).astype(
      u_ref.dtype)
  lse_ref[...] = m + jnp.log(l)


def _backward_kernel(qkv_ref, *refs, scale, causal):
  """`refs`: [the three biases,] lse, du, then the outputs dqkv [T, 3, D]
  [and the biases' sums over the sequence, [3, D]]."""
  biased = len(refs) == 7
  bias_refs = refs[:3] if biased else ()
  lse_ref, du_ref, dqkv_ref = refs[len(bias_refs):len(bias_refs) + 3]
  q, k, v = _tiles(qkv_ref, bias_refs, du_ref.dtype)
  du = du_ref[...]
  p = jnp.exp(_logits(q, k, scale, causal) - lse_ref[...][:, None])
  dv = plgpu.dot(p.astype(du.dtype).T, du)
  dp = plgpu.dot(du, v.T)
  ds = p * (dp - jnp.sum(p * dp, axis=1)[:, None]) * scale
  dq = plgpu.dot(ds.astype(k.dtype), k)
  dk = plgpu.dot(ds.astype(q.dtype).T, q)
  for i, g in enumerate((dq, dk, dv)):
    dqkv_ref[:, i, :] = g.astype(dqkv_ref.dtype)
    if biased:
      refs[-1][i, :] = jnp.sum(g, axis=0)


def _specs(qkv_shape, biased: bool):
  """The grid (B, H) and the blocks of qkv (and dqkv), the biases, a
  [B, T, H, D] tile and lse [B, H, T]."""
  B, T, _, H, D = qkv_shape
  packed = pl.BlockSpec((None, T, 3, None, D), lambda b, h: (b, 0, 0, h, 0))
  bias = [pl.BlockSpec((None, D), lambda b, h: (h, 0))] * (3 * biased)
  tile = pl.BlockSpec((None, T, None, D), lambda b, h: (b, 0, h, 0))
  lse = pl.BlockSpec((None, None, T), lambda b, h: (b, h, 0))
  return (B, H), packed, bias, tile, lse


def _forward(qkv, biases, scale, causal):
  B, T, _, H, D = qkv.shape
  grid, packed, bias, tile, lse = _specs(qkv.shape, bool(biases))
  return pl.pallas_call(
      functools.partial(_forward_kernel, scale=scale, causal=causal),
      grid=grid, in_specs=[packed] + bias, out_specs=[tile, lse],
      out_shape=[jax.ShapeDtypeStruct((B, T, H, D), qkv.dtype),
                 jax.ShapeDtypeStruct((B, H, T), jnp.float32)],
      compiler_params=_compiler_params(D),
      interpret=_pallas.interpret(), name="packed_attention",
  )(qkv, *biases)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _packed(qkv, biases, scale, causal):
  return _forward(qkv, biases, scale, causal)[0]


def _packed_forward(qkv, biases, scale, causal):
  u, lse = _forward(qkv, biases, scale, causal)
  return u, (qkv, biases, lse)


def _packed_backward(scale, causal, residuals, du):
  qkv, biases, lse = residuals
  B, _, _, H, D = qkv.shape
  grid, packed, bias, tile, lse_spec = _specs(qkv.shape, bool(biases))
  sums = [pl.BlockSpec((None, 3, None, D), lambda b, h: (b, 0, h, 0))]
  out = pl.pallas_call(
      functools.partial(_backward_kernel, scale=scale, causal=causal),
      grid=grid, in_specs=[packed] + bias + [lse_spec, tile],
      out_specs=[packed] + sums * bool(biases),
      out_shape=[jax.ShapeDtypeStruct(qkv.shape, qkv.dtype)]
      + [jax.ShapeDtypeStruct((B, 3, H, D), jnp.float32)] * bool(biases),
      compiler_params=_compiler_params(D),
      interpret=_pallas.interpret(), name="packed_attention_backward",
  )(qkv, *biases, lse, du.astype(qkv.dtype))
  if not biases:
    return out[0], ()
  db_3xHxD = jnp.sum(out[1], axis=0)
  return out[0], tuple(db_3xHxD[i].astype(b.dtype)
                       for i, b in enumerate(biases))


_packed.defvjp(_packed_forward, _packed_backward)


def attention(qkv_BxTx3xHxD: jax.Array, temperature: float, *,
              biases: tuple[jax.Array, ...] | None = None,
              causal: bool = True) -> jax.Array:
  r""":math:`U = \mathrm{softmax}(\mathrm{mask}(QK^\top/\lambda))V` per head,
  [B, T, H, D] in the projections' dtype (module doc), from the q, k, v
  projections side by side without biases; `temperature` a Python number,
  `biases` (b_q, b_k, b_v) each [H, D] or None.
  """
  if qkv_BxTx3xHxD.ndim != 5 or qkv_BxTx3xHxD.shape[2] != 3:
    raise ValueError(f"attention takes [B, T, 3, H, D], got "
                     f"{qkv_BxTx3xHxD.shape}.")
  if qkv_BxTx3xHxD.shape[1] > BLOCK:
    raise ValueError(f"attention takes T <= {BLOCK} tokens, got "
                     f"{qkv_BxTx3xHxD.shape[1]}.")
  return _packed(qkv_BxTx3xHxD, tuple(biases or ()), 1.0 / temperature,
                 causal)
