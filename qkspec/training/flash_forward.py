r"""The loss's forward, and its dW, as attention: FlashAttention-3 (Hopper).

Shapes: N = tokens, d = model width, V = vocabulary; S vocabulary splits.

The forward of `pallas_xent`'s `dh_in_forward` mode needs, per token n,

.. math:: \mathrm{lse}_n = \log\sum_v e^{z_{nv}},\qquad
          \bar w_n = \sum_v \mathrm{softmax}(z_n)_v\,W_{:, v},\qquad
          z = hW,

and that is attention with query :math:`h_n`, keys and values
:math:`W^\top` (no scaling, no mask): :math:`\bar w` is its output and
lse its softmax statistic. jax ships a FlashAttention-3 kernel for Hopper
GPUs (`jax.experimental.pallas.ops.gpu.attention_mgpu`, Mosaic GPU: TMA
loads, asynchronous warpgroup matmuls, two compute warpgroups that take
turns at softmax and matmul), which is what `pallas_xent`'s Triton
kernels cannot express (bench/gpu_results.md (7): their matmuls are
waited for at once). `forward` feeds the loss to it; the rest is O(Nd)
work in XLA:

* **Vocabulary padding.** The kernel needs the key count to be a multiple
  of its key block, and has no mask. So the keys are W's columns padded to
  :math:`V_p` by P copies of its last column r = V - 1, and the values by
  P zero rows: the copies add :math:`P e^{z_{nr}}` to the softmax sum and
  nothing to the output's numerator. With :math:`s'` the padded sum,
  :math:`s = s' - P e^{z_{nr}}`, i.e. :math:`\mathrm{lse} = \mathrm{lse}'
  + \log(1 - P e^{z_{nr} - \mathrm{lse}'})` and :math:`\bar w = \bar w'
  e^{\mathrm{lse}' - \mathrm{lse}}`. It is stable: :math:`s'` holds
  :math:`e^{z_{nr}}` P + 1 times, so :math:`P e^{z_{nr} - \mathrm{lse}'}
  \le P/(P + 1)` and the log's argument stays >= 1/(P + 1) (a zero-padded
  key would add :math:`P e^0`, which cancels badly when every logit is
  very negative).
* **Vocabulary splits.** With one program per 2 x 64 rows, N = 4096 and
  5 members give 160 programs for 132 multiprocessors; the vocabulary is
  cut into S parts that the kernel sees as a batch (query repeated), and
  the parts merge as `pallas_xent` merges its splits:
  :math:`\mathrm{lse} = M + \log\sum_k e^{\mathrm{lse}_k - M}`,
  :math:`\bar w = \sum_k e^{\mathrm{lse}_k - \mathrm{lse}}\,\bar w_k`. The
  padding lies in the last part, which must hold r.
* **Members.** Under `jax.vmap` (a kappa sweep's members) the kernel call
  folds the member axis into its batch (`jax.custom_batching.custom_vmap`):
  one launch of members x S x N/128 programs.
* **Target logits** :math:`z_{n, y_n} = h_n \cdot W_{:, y_n}` and
  :math:`z_{nr}` come from a gather and a row dot in float32 (of the same
  half-precision operands the kernel reads).
* **Units and shapes.** The kernel returns lse in base 2 (times ln 2 here),
  needs d a multiple of 64 (h and W padded with zeros: the logits are
  unchanged and the output's extra columns zero) and N a multiple of two
  query blocks (rows padded, then dropped).

Precision: the kernel reads float16 or bfloat16 (its shared-memory tiles
are declared float16 in jax 0.11, so `forward` casts to float16, which has
3 more mantissa bits than bfloat16 and ample range for layer-normed h and
W), computes the softmax in float32 and rounds its output :math:`\bar w`
to float16 (relative ~5e-4; tests/flash_forward_test.py bounds dh from
it against float32).

`weight_grad` turns the kernel round for dW: the vocabulary as queries,
the tokens as keys (its docstring has the algebra and float16's range).

The kernel runs only on a Hopper GPU. `forward(..., attention=...)` takes
any function with its contract, so the CPU tests check everything above
with `reference_attention` in its place; bench/xent_kernel.py times the
real one ("F/fa3/DW" settings, `schema.pallas_settings`).
"""
import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from qkspec.training.fused_xent import pad_to, round_up

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
  "fa3" dW of `pallas_xent`).

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
