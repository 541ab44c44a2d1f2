r"""The loss's forward as attention: jax's FlashAttention-3 kernel (Hopper).

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
  keys = jnp.concatenate([wk, jnp.repeat(wk[:, -1:], pad, axis=1)], axis=1)
  values = pad_to(wk, 1, columns)
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
