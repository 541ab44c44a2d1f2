r"""Output projection + cross-entropy through FlashAttention-3 (Hopper GPUs).

Shapes: N = tokens, d = model width, V = vocabulary; S vocabulary splits,
G token groups.

The loss :math:`L = \sum_n w_n (\mathrm{lse}_n - z_{n, y_n})`, z = hW, and
its gradient :math:`\partial h_n = g_n (\bar w_n - W_{:, y_n})` need per
token :math:`\mathrm{lse}_n` and :math:`\bar w_n = \sum_v
\mathrm{softmax}(z_n)_v\,W_{:, v}`: attention with query :math:`h_n` and
keys and values :math:`W^\top`. `cross_entropy_sum` feeds it to jax's
FlashAttention-3 (`attention_mgpu`), so no [N, V] logits leave the chip; dW
is attention too (`weight_grad`). The vocabulary is padded to the key block
by copies of its last column (their share of the softmax is taken out
again) and cut into S parts the kernel sees as a batch, merged by
log-sum-exp; under `jax.vmap` the members fold into that batch
(`custom_vmap`). The kernel reads float16 and computes the softmax in
float32; on a CPU `reference_attention` stands in (tests).
"""
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from qkspec.kernels import _pallas
from qkspec.kernels import chunked_xent
from qkspec.kernels.chunked_xent import pad_to, round_up

LN2 = math.log(2.0)
HEADROOM = 10.0      # nats between weight_grad's largest value and float16's


class FlashConfig(NamedTuple):
  """The kernel's blocks (`check_config` checks them)."""
  block_q: int        # query rows per compute warpgroup (2 per program)
  block_kv: int       # keys (vocabulary columns) per step
  stages: int         # the kernel's max_concurrent_steps
  splits: int = 1     # vocabulary parts, seen by the kernel as its batch


def check_config(config) -> FlashConfig:
  """`FlashConfig(*config)`, or ValueError naming the field the kernel
  refuses."""
  config = FlashConfig(*config)
  block_q, block_kv, stages, splits = config
  for name, value, ok, must in (
      ("block_q", block_q, block_q >= 64 and not block_q % 64,
       "a multiple of 64"),
      ("block_kv", block_kv, block_kv >= 64 and not block_kv % 64,
       "a multiple of 64"),
      ("STAGES (its max_concurrent_steps)", stages, stages >= 2, ">= 2"),
      ("SPLITS", splits, splits >= 1, ">= 1")):
    if not ok:
      raise ValueError(f"FlashAttention-3 settings: {name} must be {must}, "
                       f"got {value}.")
  return config


def reference_attention(q, k, v, config):
  """`library_attention`'s contract in jnp: q [B, Tq, 1, D], k, v [B, Tk,
  1, D] -> (out [B, Tq, 1, D] in q's dtype, lse [B, 1, Tq] in base 2)."""
  del config
  z = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32),
                 k.astype(jnp.float32))
  lse = jax.nn.logsumexp(z, axis=-1)                       # [B, 1, Tq]
  p = jnp.exp(z - lse[..., None])
  out = jnp.einsum("bhqk,bkhd->bqhd", p, v.astype(jnp.float32))
  return out.astype(q.dtype), lse / LN2


def library_attention(q, k, v, config):
  """jax's FlashAttention-3 (Mosaic GPU, Hopper) with its residual lse."""
  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas.ops.gpu import attention_mgpu
  block_q, block_kv, stages, _ = config
  tuning = attention_mgpu.TuningConfig(block_q=block_q, block_kv=block_kv,
                                       max_concurrent_steps=stages)
  out, (lse,) = attention_mgpu.attention(q, k, v, tuning,
                                         save_residuals=True)
  return out, lse


def _batched(attention, config):
  """`attention` with `config`, whose vmapped axis joins its batch axis (one
  launch); None: `library_attention`, or `reference_attention` where the
  Pallas kernels are interpreted (a CPU)."""
  if attention is None:
    attention = (reference_attention if _pallas.interpret()
                 else library_attention)

  @jax.custom_batching.custom_vmap
  def call(q, k, v):
    return attention(q, k, v, config)

  @call.def_vmap
  def _rule(axis_size, in_batched, q, k, v):
    q, k, v = (x if b else jnp.broadcast_to(x, (axis_size,) + x.shape)
               for x, b in zip((q, k, v), in_batched))
    fold = lambda x: x.reshape((-1,) + x.shape[2:])     # noqa: E731
    out, lse = call(fold(q), fold(k), fold(v))
    unfold = lambda x: x.reshape((axis_size, -1) + x.shape[1:])  # noqa: E731
    return (unfold(out), unfold(lse)), (True, True)

  return call


def forward(h, w, targets, config: FlashConfig, attention=None,
            dtype=jnp.float16):
  r"""(lse, z_y [N], :math:`\bar w` [N, d]) float32 of h [N, d], W [d, V]:
  the log-sum-exp of z = hW, the target logits, the softmax mean of W's
  columns. `config`: a `FlashConfig` or tuple; `attention`: one of
  `library_attention`'s contract (None: `_batched`'s); `dtype`: what the
  kernel reads."""
  config = check_config(config)
  block_q, block_kv, _, splits = config
  n, d = h.shape
  vocab = w.shape[1]
  columns = round_up(vocab, splits * block_kv)
  part = columns // splits
  pad = columns - vocab
  if vocab - 1 < (splits - 1) * part:
    raise ValueError(f"FlashAttention-3 settings: {splits} splits of "
                     f"{part} columns leave the last without a column of the "
                     f"vocabulary ({vocab}); use fewer splits.")
  width = round_up(d, 64)
  hq = pad_to(pad_to(h.astype(dtype), 0, round_up(n, 2 * block_q)), 1, width)
  wk = pad_to(w.astype(dtype), 0, width)
  values = pad_to(wk, 1, columns)
  # the keys as a select over the values' shape (not a concatenation), so
  # that XLA makes both in one pass over W
  keys = jnp.where(jnp.arange(columns) < vocab, values, wk[:, -1:])
  split = lambda x: x.T.reshape(splits, part, 1, width)    # noqa: E731
  q = jnp.broadcast_to(hq[None, :, None], (splits, hq.shape[0], 1, width))
  out, lse2 = _batched(attention, config)(q, split(keys), split(values))
  lse_k = lse2[:, 0, :n].astype(jnp.float32) * LN2          # [S, N]
  mean_k = out[:, :n, 0, :d].astype(jnp.float32)            # [S, N, d]
  h32, w32 = hq[:n, :d].astype(jnp.float32), wk[:d].astype(jnp.float32)
  if pad:
    z_r = h32 @ w32[:, -1]
    last = lse_k[-1] + jnp.log1p(-pad * jnp.exp(z_r - lse_k[-1]))
    mean_k = mean_k.at[-1].multiply(jnp.exp(lse_k[-1] - last)[:, None])
    lse_k = lse_k.at[-1].set(last)
  lse = jax.nn.logsumexp(lse_k, axis=0)
  mean = jnp.sum(jnp.exp(lse_k - lse[None])[..., None] * mean_k, axis=0)
  z_y = jnp.sum(h32 * jnp.take(w32, targets, axis=1).T, axis=1)
  return lse, z_y, mean


def weight_grad(h, w, targets, lse, g, config: FlashConfig, attention=None,
                dtype=jnp.float16):
  r"""dW [d, V] float32 :math:`= \sum_n g_n (\mathrm{softmax}(z_n) -
  e_{y_n}) h_n^\top`, z = hW, `lse` [N] the forward's, `g` [N] the row
  scales (cotangent x weights).

  Column v of the softmax part is attention with query :math:`W_{:, v}`,
  keys :math:`h_n` and values :math:`u_n = g_n e^{-\mathrm{lse}_n - c}\,
  h_n`: the kernel's :math:`o_v` and :math:`\ell_v` give the column
  :math:`e^{c + \ell_v} o_v`. For float16's range the tokens are sorted by
  :math:`\epsilon_n = \log|g_n| - \mathrm{lse}_n + \log\max_j|h_{nj}|`
  into `config.splits` groups, each with c HEADROOM nats below its largest
  :math:`\epsilon` (no overflow; full precision over ~19.7 nats per
  group), summed in float32. `config`: block_q vocabulary rows, block_kv
  tokens per step.
  """
  config = check_config(config)
  block_q, block_kv, _, groups = config
  n, d = h.shape
  vocab = w.shape[1]
  width = round_up(d, 64)
  rows = round_up(n, groups * block_kv)
  hk = pad_to(h.astype(dtype), 1, width)
  hk = jnp.concatenate([hk, jnp.repeat(hk[-1:], rows - n, axis=0)], axis=0)
  g = pad_to(g.astype(jnp.float32), 0, rows)                # pads: g = 0
  h32 = hk.astype(jnp.float32)
  peak = jnp.max(jnp.abs(h32), axis=1)
  live = (g != 0) & (peak > 0)
  eps = jnp.where(live, jnp.log(jnp.where(live, jnp.abs(g), 1.0))
                  - pad_to(lse, 0, rows)
                  + jnp.log(jnp.where(live, peak, 1.0)), -jnp.inf)
  order = jnp.argsort(eps)
  grouped = lambda x: x[order].reshape((groups, -1) + x.shape[1:])  # noqa: E731
  eps_g, live_g = grouped(eps), grouped(live)
  top = jnp.max(eps_g, axis=1)                              # -inf: no live
  c = jnp.where(jnp.isfinite(top), top - HEADROOM, 0.0)     # [G]
  scale = jnp.where(live_g, jnp.sign(grouped(g)) * jnp.exp(
      jnp.where(live_g, eps_g, 0.0) - c[:, None]) / grouped(jnp.where(
          live, peak, 1.0)), 0.0)                           # [G, N/G]
  keys = grouped(hk)                                        # [G, N/G, width]
  values = (keys.astype(jnp.float32) * scale[..., None]).astype(dtype)
  wq = pad_to(pad_to(w.astype(dtype), 0, width), 1,
              round_up(vocab, 2 * block_q))                 # [width, Vq]
  q = jnp.broadcast_to(wq.T[None, :, None], (groups,) + wq.T.shape[:1]
                       + (1, width))
  out, lse2 = _batched(attention, config)(q, keys[:, :, None],
                                          values[:, :, None])
  ell = lse2[:, 0, :vocab].astype(jnp.float32) * LN2 + c[:, None]  # [G, V]
  factor = jnp.where(jnp.isfinite(top)[:, None], jnp.exp(ell), 0.0)
  dw = jnp.einsum("gv,gvd->vd", factor,
                  out[:, :vocab, 0, :d].astype(jnp.float32))
  # the one-hot part, scattered into the softmax part in place
  dw = dw.at[targets].add(-g[:n, None] * h32[:n, :d])
  return dw.T


# The settings measured fastest on an H200 (bench/README.md): 64-token
# query blocks, 128 vocabulary columns a step, 2 stages; the forward's
# vocabulary in 4 parts, dW's tokens in 2 groups.
FORWARD = FlashConfig(64, 128, 2, 4)
WEIGHT_GRAD = FlashConfig(64, 128, 2, 2)


@jax.custom_vjp
def cross_entropy_sum(h: jax.Array, kernel: jax.Array, targets: jax.Array,
                      weights: jax.Array) -> jax.Array:
  r"""Float32 :math:`\sum_n w_n \mathrm{CE}(h_n W, y_n)` (module doc).

  h [N, d], `kernel` [d, V] (no bias), `targets` int [N], `weights` float
  [N] (0 for padding; not differentiated).
  """
  return _loss(h, kernel, targets, weights)[0]


def _loss(h, kernel, targets, weights):
  chunked_xent.check_inputs(h, kernel, targets, weights)
  vocab_blocks = -(-kernel.shape[1] // FORWARD.block_kv)   # small V: fewer
  config = FORWARD._replace(splits=min(FORWARD.splits, vocab_blocks))
  lse, z_y, mean_w = forward(h, kernel, targets, config)
  loss = jnp.sum(weights.astype(jnp.float32) * (lse - z_y))
  return loss, (h, kernel, targets, weights, lse, mean_w)


def _backward(residuals, cotangent):
  h, kernel, targets, weights, lse, mean_w = residuals
  g = cotangent * weights.astype(jnp.float32)
  w_y = jnp.take(kernel.astype(jnp.float16), targets, axis=1).T
  d_h = g[:, None] * (mean_w - w_y.astype(jnp.float32))
  d_kernel = weight_grad(h, kernel, targets, lse, g, WEIGHT_GRAD)
  return (d_h.astype(h.dtype), d_kernel.astype(kernel.dtype),
          *chunked_xent.no_cotangents(targets, weights))


cross_entropy_sum.defvjp(_loss, _backward)
