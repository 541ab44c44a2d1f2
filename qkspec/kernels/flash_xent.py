r"""Output projection + cross-entropy through FlashAttention-3 (Hopper GPUs).

Shapes: N = tokens, d = model width, V = vocabulary; S vocabulary splits,
G token groups.

The loss :math:`L = \sum_n w_n (\mathrm{lse}_n - z_{n, y_n})`, z = hW, and
its gradient :math:`\partial h_n = g_n (\bar w_n - W_{:, y_n})`,
:math:`g_n = c\,w_n`, need per token

.. math:: \mathrm{lse}_n = \log\sum_v e^{z_{nv}},\qquad
          \bar w_n = \sum_v \mathrm{softmax}(z_n)_v\,W_{:, v},

and that is attention with query :math:`h_n`, keys and values
:math:`W^\top` (no scaling, no mask): :math:`\bar w` is its output and
lse its softmax statistic. jax ships a FlashAttention-3 kernel for Hopper
GPUs (`jax.experimental.pallas.ops.gpu.attention_mgpu`, Mosaic GPU), and
`cross_entropy_sum` feeds the loss to it, so no [N, V] block of logits
ever leaves the chip; dW is attention too (`weight_grad`: the vocabulary
as queries, the tokens as keys). The rest is O(Nd) work in XLA:

* **Vocabulary padding.** The kernel needs the key count to be a multiple
  of its key block, and has no mask. So the keys are W's columns padded to
  :math:`V_p` by P copies of its last column r = V - 1, and the values by
  P zero rows: the copies add :math:`P e^{z_{nr}}` to the softmax sum and
  nothing to the output's numerator, which is taken out again,
  :math:`\mathrm{lse} = \mathrm{lse}' + \log(1 - P e^{z_{nr} -
  \mathrm{lse}'})`, :math:`\bar w = \bar w' e^{\mathrm{lse}' -
  \mathrm{lse}}` (stable: the log's argument stays >= 1/(P + 1)).
* **Vocabulary splits.** The vocabulary is cut into S parts that the
  kernel sees as a batch (more programs in flight) and merged:
  :math:`\mathrm{lse} = M + \log\sum_k e^{\mathrm{lse}_k - M}`,
  :math:`\bar w = \sum_k e^{\mathrm{lse}_k - \mathrm{lse}}\,\bar w_k`.
* **Members.** Under `jax.vmap` (a kappa sweep) the member axis folds into
  the kernel's batch (`jax.custom_batching.custom_vmap`): one launch.
* **Units and shapes.** The kernel returns lse in base 2, needs d a
  multiple of 64 (zero padding) and N a multiple of two query blocks.

Precision: the kernel reads float16 (more mantissa than bfloat16, ample
range for layer-normed h and W), computes the softmax in float32 and
rounds :math:`\bar w` to float16 (relative ~5e-4). The kernel runs only on
a Hopper GPU; every function takes `attention=` with its contract, and on
a CPU `reference_attention` stands in (tests).
"""
import functools
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
  for name in ("block_q", "block_kv"):
    v = getattr(config, name)
    if v < 64 or v % 64:
      raise ValueError(f"FlashAttention-3 settings: {name} must be a "
                       f"multiple of 64, got {v}.")
  if config.stages < 2:
    raise ValueError("FlashAttention-3 settings: STAGES (its "
                     f"max_concurrent_steps) must be >= 2, got "
                     f"{config.stages}.")
  if config.splits < 1:
    raise ValueError(f"FlashAttention-3 settings: SPLITS must be >= 1, got "
                     f"{config.splits}.")
  return config


def reference_attention(q, k, v, config):
  """The contract of `library_attention` in plain jnp (float32 softmax):
  q [B, Tq, 1, D], k and v [B, Tk, 1, D] -> (out [B, Tq, 1, D] in q's
  dtype, lse [B, 1, Tq] in base 2)."""
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


def _batched(attention):
  """`attention` whose vmapped axis joins its batch axis (one launch)."""
  @jax.custom_batching.custom_vmap
  def call(q, k, v):
    return attention(q, k, v)

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
  r"""(lse [N], z_y [N], :math:`\bar w` [N, d]) float32 of h [N, d] and W
  [d, V] (see module): the softmax statistics of z = hW, the target
  logits and the softmax mean of W's columns.

  Args:
    h: [N, d].
    w: [d, V].
    targets: int [N].
    config: a `FlashConfig` (block_q, block_kv, stages, splits), or a
      tuple of them.
    attention: (q, k, v, config) -> (out, lse in base 2), the contract of
      `library_attention` (the default); `reference_attention` on a CPU.
    dtype: what the kernel reads.
  """
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
  call = _batched(functools.partial(attention or library_attention,
                                    config=config))
  out, lse2 = call(q, split(keys), split(values))
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
  e_{y_n}) h_n^\top`, z = hW, with the softmax part as attention (the
  training's dW).

  Column v of the softmax part, :math:`\sum_n g_n e^{z_{nv} -
  \mathrm{lse}_n} h_n`, is attention with query :math:`W_{:, v}`, keys
  :math:`h_n` and values :math:`u_n = g_n e^{-\mathrm{lse}_n - c}\,h_n`
  (the tokens' own normaliser moved into the values): the kernel returns
  :math:`o_v = \sum_n e^{z_{nv}} u_n / \sum_n e^{z_{nv}}` and
  :math:`\ell_v = \log\sum_n e^{z_{nv}}`, so the column is
  :math:`e^{c + \ell_v} o_v`. The denominator cancels: key padding (copies
  of the last token with zero values) needs no correction, unlike
  `forward`'s.

  Range: the values are float16, and :math:`e^{-\mathrm{lse}_n}` spans as
  many nats as lse does over the batch. So the tokens are sorted by
  :math:`\epsilon_n = \log|g_n| - \mathrm{lse}_n + \log\max_j|h_{nj}|`
  and cut into `config.splits` equal groups, each its own batch entry
  with its own c, HEADROOM nats below its largest :math:`\epsilon`, and
  values :math:`\pm e^{\epsilon_n - c} h_n / \max_j|h_{nj}|`: at most
  :math:`e^{10}` (float16's largest is :math:`e^{11.09}`, so nothing
  overflows), at full float16 precision down to :math:`e^{-9.7}`, i.e.
  for a group spanning up to ~19.7 nats of :math:`\epsilon`; tokens
  further below lose precision gradually (subnormals) and are dropped
  past ~26.6 nats. The groups' columns add up in float32. Tokens with
  :math:`g_n = 0` (padding) get zero values.

  Args:
    h: [N, d].
    w: [d, V].
    targets: int [N].
    lse: float32 [N], the forward's log-sum-exp of z.
    g: float32 [N], the row scales (cotangent x weights).
    config: a `FlashConfig`; block_q vocabulary rows, block_kv tokens per
      step, and `splits` token groups.
    attention: as `forward`'s.
    dtype: what the kernel reads.
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
  call = _batched(functools.partial(attention or library_attention,
                                    config=config))
  out, lse2 = call(q, keys[:, :, None], values[:, :, None])
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


def _attention(interpret: bool | None):
  """The kernel, or its stand-in where the kernels are interpreted."""
  interpret = _pallas.interpret_mode(interpret, "the loss kernels")
  return reference_attention if interpret else None


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def cross_entropy_sum(h: jax.Array, kernel: jax.Array, targets: jax.Array,
                      weights: jax.Array, interpret: bool | None = None
                      ) -> jax.Array:
  r"""Weighted sum :math:`\sum_n w_n \mathrm{CE}(h_n W, y_n)` (module doc).

  Args:
    h: [N, d] hidden states.
    kernel: [d, V] output projection (no bias).
    targets: int [N].
    weights: float [N] (0 for padding). Not differentiated.
    interpret: run the reference in place of the kernel; None: on a CPU.

  Returns:
    A float32 scalar; divide by `sum(weights)` for the mean.
  """
  return _loss(h, kernel, targets, weights, interpret)[0]


def _loss(h, kernel, targets, weights, interpret):
  chunked_xent.check_inputs(h, kernel, targets, weights)
  vocab_blocks = -(-kernel.shape[1] // FORWARD.block_kv)   # small V: fewer
  config = FORWARD._replace(splits=min(FORWARD.splits, vocab_blocks))
  lse, z_y, mean_w = forward(h, kernel, targets, config,
                             attention=_attention(interpret))
  loss = jnp.sum(weights.astype(jnp.float32) * (lse - z_y))
  return loss, (h, kernel, targets, weights, lse, mean_w)


def _backward(interpret, residuals, cotangent):
  h, kernel, targets, weights, lse, mean_w = residuals
  g = cotangent * weights.astype(jnp.float32)
  w_y = jnp.take(kernel.astype(jnp.float16), targets, axis=1).T
  d_h = g[:, None] * (mean_w - w_y.astype(jnp.float32))
  d_kernel = weight_grad(h, kernel, targets, lse, g, WEIGHT_GRAD,
                         attention=_attention(interpret))
  return (d_h.astype(h.dtype), d_kernel.astype(kernel.dtype),
          *chunked_xent.no_cotangents(targets, weights))


cross_entropy_sum.defvjp(_loss, _backward)
