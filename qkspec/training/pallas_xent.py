r"""Output projection + cross-entropy as Pallas (Triton) kernels, no HBM logits.

Shapes: N = tokens, d = model width, V = vocabulary; BN rows and BV
vocabulary columns per block.

The same quantity as `qkspec.training.fused_xent`,

.. math:: L = \sum_n w_n\,(\mathrm{lse}(z_n) - z_{n, y_n}),\quad z = hW,
          \qquad \frac{\partial L}{\partial z_n}
          = w_n\,(\mathrm{softmax}(z_n) - e_{y_n}),

but computed so that no [N, V] (or [C, V]) block of logits ever leaves the
chip. On a GPU the XLA paths are bound by memory traffic over those blocks
(bench/gpu_results.md: two logits-sized reductions, a cast and two
transposes are ~63% of the paper's LM step); here every logit tile
:math:`z_{IJ} = h_I W_J` ([BN, BV]) lives in registers/shared memory and is
recomputed where needed (the flash-attention trade: FLOPs for bytes).

Forward (one program per row block I; a loop over column blocks J): the
online log-sum-exp of Milakov & Gimelshein (2018),
:math:`m \leftarrow \max(m, \max_J z_{IJ})`,
:math:`s \leftarrow s\,e^{m_\mathrm{old} - m} + \sum_J e^{z_{IJ} - m}`, and
the target logit :math:`z_{n, y_n}` picked by an iota comparison. Output:
:math:`\mathrm{lse} = m + \log s` and :math:`z_{n,y_n}`, two [N] vectors.

Backward, given the cotangent :math:`c` and so the row scales
:math:`g_n = c\,w_n`, with :math:`\partial z_{IJ} = g_I \odot
(e^{z_{IJ} - \mathrm{lse}_I} - \mathrm{onehot}(y_I)_J)` recomputed from h, W
and lse:

* dh kernel (one program per row block I, loop over J):
  :math:`\partial h_I = \sum_J \partial z_{IJ} W_J^\top`;
* dW kernel (one program per column block J, loop over I):
  :math:`\partial W_J = \sum_I h_I^\top \partial z_{IJ}`.

So 5 logits-sized matmuls (2NdV FLOPs each: forward, and a recompute plus
a gradient matmul in each backward kernel) instead of 3, with HBM traffic of
O(Nd + dV) per pass instead of O(NV). Both kernels are deterministic (no
atomics).

`dh_in_forward` makes them 4. Since :math:`\sum_J \partial z_{IJ}
W_J^\top = g_I \odot (\bar w_I - W_{:, y_I}^\top)` with
:math:`\bar w_n = \sum_v \mathrm{softmax}(z_n)_v W_{:, v}`, the softmax
mean of W's columns, and :math:`\bar w` is what flash attention computes
for the query h with keys and values :math:`W^\top` (Dao et al. 2022), the
forward kernel of a differentiated call (then "xent_forward_dh")
accumulates :math:`\bar w` online beside (m, s) — rescaling it by
:math:`e^{m_\mathrm{old} - m}` as s is rescaled — and the backward takes
dh from it in XLA with a gather of W's target columns, with no dh kernel:
the logits are formed twice (forward, dW) instead of three times. It is
also more accurate in bfloat16: the one-hot is subtracted in float32,
where the dh kernel rounds :math:`p - \mathrm{onehot}` to bfloat16 before
its matmul (tests/pallas_xent_test.py measures both against float32).

Each of the three kernels may take its own blocks and Triton launch
(`backward`; `model.loss_pallas` "FORWARD/DH/DW", "FORWARD/fwd/DW" for
`dh_in_forward`): the plain forward has one matmul per tile and the
backward kernels two, so their best shapes need not agree. The forward
and dh kernels may also split the vocabulary over S programs per row
block (`vocab_splits`, a fifth setting field):
each split keeps its own online (m, s) pair, or its part of dh, and the
S partial results are merged after (:math:`\mathrm{lse} = M + \log
\sum_k s_k e^{m_k - M}`, :math:`M = \max_k m_k`; dh summed). At the
paper's shapes a row block of 64 gives only 64 x 5 members = 320 programs
to the H100's 132 multiprocessors, where the dW kernel, one program per
column block, has 1,300; the trace showed the forward kernel at about a
third of the dW kernel's TFLOP/s (bench/gpu_results.md (4)).

Padding: rows to a multiple of the largest BN with zero weight, columns of
W to a multiple of the largest BV x splits (masked to :math:`-\infty`
inside the kernels), d to a power of two >= 16 with zeros (Triton's block
shapes); none of it changes the result.

The kernels are written for Pallas' Triton backend (selected explicitly by
`CompilerParams`, since jax >= 0.10 defaults GPU kernels to Mosaic GPU).
jax 0.11 deprecates that backend (a DeprecationWarning when the kernels are
lowered); jax 0.11.2, the device image's, and 0.12.0.1 still lower them
(tests/pallas_xent_test.py, run under both). Their matmuls are waited for
at once (bench/gpu_results.md (7)); `flash_forward` (a "FORWARD/fa3/DW"
setting) replaces the `dh_in_forward` forward with jax's FlashAttention-3
kernel for Hopper (Mosaic GPU, `attention_mgpu`), whose query, keys and
values are h, W^T and W^T, and keeps the Triton dW kernel, or ("F/fa3/
fa3xG", `flash_dw`) takes dW from the same kernel with the vocabulary as
queries and the tokens as keys (`flash_forward.weight_grad`): then no
Triton kernel runs in training, which is the way on should the Triton
backend be removed; tokamax
0.0.17 offers no GPU kernel for this loss to fall back on (on a GPU its
`linear_softmax_cross_entropy_loss` defaults to an XLA loss that writes the
logits, and offers a chunked XLA one like `fused_xent`; its Pallas kernel
is for TPUs only).
On a CPU they run in Pallas' interpreter (`interpret=None` chooses it),
which is how tests/pallas_xent_test.py checks value and gradients against
`optax` and `fused_xent`, vmapped as the κ-sweep does, in float32 and
bfloat16; the same tests lower the kernels to Triton IR for CUDA, so an
operation Pallas cannot express in Triton fails here, not on a GPU (what
only Triton's own compiler sees, shared memory and registers, shows on a
GPU: bench/xent_kernel.py). The interpreter is slow: use `fused_xent` for
CPU training. No TPU lowering (tokamax's
`linear_softmax_cross_entropy_loss` is the natural choice there). Under a
multi-device mesh the kernels are opaque to XLA's partitioner, which we
expect to gather their inputs to each device (correct, not fast; not
measured).
"""
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pl_triton

from qkspec.config import schema
from qkspec.training import flash_forward as flash_lib
from qkspec.training import fused_xent
from qkspec.training import pallas_common
from qkspec.training.fused_xent import pad_to, round_up

_MIN_SIDE = 16       # d is padded to a power of two >= this (Triton dots)
DEFAULTS = schema.pallas_settings(schema.PALLAS_SETTINGS)   # BN, BV, ...


def _column_ids(j, block_vocab, offset=0):
  ids = j * block_vocab + jnp.arange(block_vocab, dtype=jnp.int32)
  return ids if isinstance(offset, int) and offset == 0 else offset + ids


def _dz(z, cols, y, lse, g, vocab):
  """dL/dz of one [BN, BV] tile: g (softmax - onehot), 0 on padded columns."""
  p = jnp.where(cols[None, :] < vocab, jnp.exp(z - lse[:, None]), 0.0)
  hit = cols[None, :] == y[:, None]
  return g[:, None] * (p - jnp.where(hit, 1.0, 0.0))


def _split_offset(w_ref, splits):
  """The first vocabulary column of this program's W block: a split's,
  program axis 1, when the vocabulary is split over programs."""
  return 0 if splits == 1 else pl.program_id(1) * w_ref.shape[1]


def _forward_kernel(h_ref, w_ref, y_ref, *out_refs, vocab, block_vocab,
                    splits, mean_w=False):
  r"""Outputs lse and zy; with splits > 1 this split's m, s and zy, which
  `_forward` combines (a split of padding alone keeps m = float32's min
  and s = 0 instead of the -inf that would make exp(m - m_new) a NaN).

  `mean_w` (the "xent_forward_dh" kernel): also the softmax-weighted mean
  of W's columns, :math:`\bar w_n = \sum_v p_{nv} W_{:, v}`, accumulated
  online as flash attention accumulates its output (query h, keys and
  values W^T): :math:`a \leftarrow a\,e^{m_\mathrm{old} - m} + e^{z_{IJ}
  - m} W_J^\top`, divided by s at the end (with splits, the unnormalised
  a of each split)."""
  h = h_ref[...]
  y = y_ref[...]
  rows = h.shape[0]
  offset = _split_offset(w_ref, splits)

  def body(j, carry):
    m, s, zy, *acc = carry
    cols = _column_ids(j, block_vocab, offset)
    w = w_ref[:, pl.ds(j * block_vocab, block_vocab)]
    z = pl_triton.dot(h, w)
    z = jnp.where(cols[None, :] < vocab, z, -jnp.inf)
    m_new = jnp.maximum(m, jnp.max(z, axis=1))
    decay = jnp.exp(m - m_new)
    p = jnp.exp(z - m_new[:, None])
    s = s * decay + jnp.sum(p, axis=1)
    zy = zy + jnp.sum(jnp.where(cols[None, :] == y[:, None], z, 0.0), axis=1)
    if mean_w:
      acc = [acc[0] * decay[:, None]
             + pl_triton.dot(p.astype(w.dtype), w, trans_b=True)]
    return m_new, s, zy, *acc

  low = -jnp.inf if splits == 1 else jnp.finfo(jnp.float32).min
  init = (jnp.full((rows,), low, jnp.float32),
          jnp.zeros((rows,), jnp.float32), jnp.zeros((rows,), jnp.float32))
  if mean_w:
    init += (jnp.zeros((rows, w_ref.shape[0]), jnp.float32),)
  m, s, zy, *acc = jax.lax.fori_loop(0, w_ref.shape[1] // block_vocab, body,
                                     init)
  if splits == 1:
    lse_ref, zy_ref, *mean_ref = out_refs
    lse_ref[...] = m + jnp.log(s)
    if mean_w:
      mean_ref[0][...] = acc[0] / s[:, None]
  else:
    m_ref, s_ref, zy_ref, *acc_ref = out_refs
    m_ref[...] = m
    s_ref[...] = s
    if mean_w:
      acc_ref[0][...] = acc[0]
  zy_ref[...] = zy


def _dh_kernel(h_ref, w_ref, y_ref, lse_ref, g_ref, dh_ref, *, vocab,
               block_vocab, splits):
  """dh of the row block; with splits > 1 this split's part of it."""
  h, y, lse, g = h_ref[...], y_ref[...], lse_ref[...], g_ref[...]
  offset = _split_offset(w_ref, splits)

  def body(j, acc):
    w = w_ref[:, pl.ds(j * block_vocab, block_vocab)]
    cols = _column_ids(j, block_vocab, offset)
    dz = _dz(pl_triton.dot(h, w), cols, y, lse, g, vocab)
    return acc + pl_triton.dot(dz.astype(w.dtype), w, trans_b=True)

  acc = jnp.zeros(dh_ref.shape, jnp.float32)
  dh_ref[...] = jax.lax.fori_loop(0, w_ref.shape[1] // block_vocab, body,
                                  acc)


def _dw_kernel(h_ref, w_ref, y_ref, lse_ref, g_ref, dw_ref, *, vocab,
               block_vocab, block_rows):
  w = w_ref[...]
  cols = _column_ids(pl.program_id(0), block_vocab)

  def body(i, acc):
    rows = pl.ds(i * block_rows, block_rows)
    h = h_ref[rows, :]
    dz = _dz(pl_triton.dot(h, w), cols, y_ref[rows], lse_ref[rows],
             g_ref[rows], vocab)
    return acc + pl_triton.dot(h, dz.astype(h.dtype), trans_a=True)

  acc = jnp.zeros(dw_ref.shape, jnp.float32)
  dw_ref[...] = jax.lax.fori_loop(0, h_ref.shape[0] // block_rows, body, acc)


KERNELS = ("xent_forward", "xent_dh", "xent_dw")


def launches(block_rows, block_vocab, num_warps, num_stages,
             backward=None, vocab_splits=1) -> dict:
  """Kernel name -> (BN, BV, warps, stages, splits): the forward's from the
  first four arguments and `vocab_splits`; `backward`, (dh's, dW's) such
  4- or 5-tuples, or None for the forward's without its splits
  (`schema.pallas_settings`' "FWD/DH/DW" form). splits > 1 (the forward
  and dh kernels) splits the vocabulary over that many programs per row
  block, whose partial results `_forward` and `_dh` combine: more
  programs in flight where a row block's program alone leaves the GPU's
  multiprocessors idle. ("xent_forward_dh", `dh_in_forward`'s forward,
  launches as "xent_forward".)"""
  forward = (block_rows, block_vocab, num_warps, num_stages)
  dh, dw = backward or (forward, forward)
  full = lambda t: tuple(t) + (1,) * (5 - len(t))   # noqa: E731
  return dict(zip(KERNELS, (forward + (vocab_splits,), full(dh), full(dw))))


class _Blocks:
  """Padded operands and the pallas_call plumbing shared by the kernels.

  `launch`: kernel name -> (BN, BV, warps, stages, splits). Rows are padded
  to a multiple of the largest BN and W's columns of the largest BV x
  splits (powers of two times a split count that `schema` checks, so a
  multiple of every kernel's)."""

  def __init__(self, h, kernel, targets, vocab, launch, compute_dtype,
               interpret):
    self.n, self.d = h.shape
    self.vocab = vocab
    self.launch = launch                     # checked by _loss
    rows = round_up(self.n, max(l[0] for l in launch.values()))
    width = max(_MIN_SIDE, pl.next_power_of_2(self.d))
    columns = max(l[1] * l[4] for l in launch.values())
    self.h = pad_to(pad_to(h.astype(compute_dtype), 0, rows), 1, width)
    self.w = pad_to(pad_to(kernel.astype(compute_dtype), 0, width), 1,
                    round_up(vocab, columns))
    self.y = pad_to(targets.astype(jnp.int32), 0, rows)
    self.interpret = pallas_common.interpret_mode(
        interpret, "pallas_xent's kernels",
        "model.loss_impl='chunked' (qkspec.training.fused_xent)",
        cpu_note="pallas_xent on a CPU runs in Pallas' interpreter (correct, "
        "slow: for tests); model.loss_impl='chunked' is the CPU path.")

  def vec(self, name):
    """[BN] of a [rows] vector, BN the kernel `name`'s (row block i)."""
    return pl.BlockSpec((self.launch[name][0],), lambda i, *_: (i,))

  def split_rows(self, name, width=None):
    """Output block of row block i and split k in [splits * rows (, width)]:
    rows k * rows + i * BN onwards (`unsplit` undoes it)."""
    bn, splits = self.launch[name][0], self.launch[name][4]
    blocks = self.h.shape[0] // bn
    index = lambda i, *k: (k[0] * blocks + i if k else i,)   # noqa: E731
    if width is None:
      return pl.BlockSpec((bn,), index)
    return pl.BlockSpec((bn, width), lambda i, *k: (*index(i, *k), 0))

  def unsplit(self, name, x):
    """[splits * rows, ...] -> [splits, rows, ...]."""
    return x.reshape(self.launch[name][4], self.h.shape[0], *x.shape[1:])

  def rows(self, x):
    return pad_to(x, 0, self.h.shape[0])

  def call(self, kernel, name, grid, in_specs, out_specs, out_shape, *args,
           label=None):
    """pallas_call with the launch of kernel `name`, named `label` (default
    `name`) in traces and IR."""
    num_warps, num_stages = self.launch[name][2:4]
    params = pl_triton.CompilerParams(num_warps=num_warps,
                                      num_stages=num_stages)
    return pl.pallas_call(kernel, grid=grid, in_specs=in_specs,
                          out_specs=out_specs, out_shape=out_shape,
                          compiler_params=params, interpret=self.interpret,
                          name=label or name)(*args)

  def by_rows(self, kernel, name, out_specs, out_shape, *vectors, label=None,
              **options):
    """A program per row block I (and vocabulary split k, when the kernel
    has splits > 1): h_I, W (its split's columns), [BN] row vectors."""
    rows, width = self.h.shape
    bn, bv, _, _, splits = self.launch[name]
    columns = self.w.shape[1] // splits
    grid = (rows // bn,) + ((splits,) if splits > 1 else ())
    in_specs = ([pl.BlockSpec((bn, width), lambda i, *_: (i, 0)),
                 pl.BlockSpec((width, columns),
                              lambda i, *k: (0, k[0] if k else 0))]
                + [self.vec(name)] * len(vectors))
    body = functools.partial(kernel, vocab=self.vocab, block_vocab=bv,
                             splits=splits, **options)
    return self.call(body, name, grid, in_specs, out_specs, out_shape,
                     self.h, self.w, *vectors, label=label)


def _forward(b: _Blocks, mean_w: bool = False):
  """(lse, zy), [N] each, and with `mean_w` the [N, d] mean of W's columns
  under each row's softmax (the "xent_forward_dh" kernel). With splits,
  each split's online (m, s) pair is merged as the kernel merges tiles:
  lse = M + log sum_k s_k e^{m_k - M}, and the mean is
  sum_k e^{m_k - M} a_k / sum_k s_k e^{m_k - M}."""
  name, (n, width) = "xent_forward", b.h.shape
  splits = b.launch[name][4]
  out = jax.ShapeDtypeStruct((splits * n,), jnp.float32)
  outputs = 2 if splits == 1 else 3
  specs, shapes = [b.split_rows(name)] * outputs, [out] * outputs
  if mean_w:
    specs.append(b.split_rows(name, width))
    shapes.append(jax.ShapeDtypeStruct((splits * n, width), jnp.float32))
  parts = b.by_rows(_forward_kernel, name, specs, shapes, b.y,
                    label="xent_forward_dh" if mean_w else None,
                    mean_w=mean_w)
  if splits == 1:
    lse, zy, *mean = parts
  else:
    m, s, zy, *acc = (b.unsplit(name, x) for x in parts)
    top = jnp.max(m, axis=0)
    scale = jnp.exp(m - top[None])
    total = jnp.sum(s * scale, axis=0)
    lse = top + jnp.log(total)
    zy = jnp.sum(zy, axis=0)
    mean = [jnp.sum(scale[..., None] * a, axis=0) / total[:, None]
            for a in acc]
  return (lse[:b.n], zy[:b.n], *(x[:b.n, :b.d] for x in mean))


def _dh(b: _Blocks, lse, g):
  """dh [N, d] float32 (the dh kernel), for row scales g and saved lse."""
  rows, width = b.h.shape
  splits = b.launch["xent_dh"][4]
  dh = b.by_rows(_dh_kernel, "xent_dh", b.split_rows("xent_dh", width),
                 jax.ShapeDtypeStruct((splits * rows, width), jnp.float32),
                 b.y, b.rows(lse), b.rows(g))
  if splits > 1:
    dh = jnp.sum(b.unsplit("xent_dh", dh), axis=0)
  return dh[:b.n, :b.d]


def _dh_from_mean(b: _Blocks, mean_w, g):
  r"""dh [N, d] float32 from the forward's softmax mean of W's columns:
  :math:`\partial h_n = g_n (\bar w_n - W_{:, y_n})`, no logits pass."""
  w_y = jnp.take(b.w, b.y[:b.n], axis=1)[:b.d].T.astype(jnp.float32)
  return g[:, None] * (mean_w - w_y)


def _dw(b: _Blocks, lse, g):
  """dW [d, V] float32 (the dW kernel), for row scales g and saved lse."""
  width = b.h.shape[1]
  lse, g = b.rows(lse), b.rows(g)
  full = lambda x: pl.BlockSpec(x.shape, lambda j: (0,) * x.ndim)
  bn, bv = b.launch["xent_dw"][:2]
  column = pl.BlockSpec((width, bv), lambda j: (0, j))
  body = functools.partial(_dw_kernel, vocab=b.vocab, block_vocab=bv,
                           block_rows=bn)
  dw = b.call(body, "xent_dw", (b.w.shape[1] // bv,),
              [full(b.h), column, full(b.y), full(lse), full(g)], column,
              jax.ShapeDtypeStruct(b.w.shape, jnp.float32),
              b.h, b.w, b.y, lse, g)
  return dw[:b.d, :b.vocab]


@functools.partial(jax.custom_vjp,
                   nondiff_argnums=(4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14))
def linear_cross_entropy(h: jax.Array, kernel: jax.Array, targets: jax.Array,
                         weights: jax.Array,
                         block_rows: int = DEFAULTS["block_rows"],
                         block_vocab: int = DEFAULTS["block_vocab"],
                         compute_dtype=jnp.float32,
                         interpret: bool | None = None,
                         num_warps: int = DEFAULTS["num_warps"],
                         num_stages: int = DEFAULTS["num_stages"],
                         backward: tuple | None = None,
                         vocab_splits: int = 1,
                         dh_in_forward: bool = False,
                         flash_forward: bool = False,
                         flash_dw: int = 0) -> jax.Array:
  r"""Weighted sum :math:`\sum_n w_n \mathrm{CE}(h_n W, y_n)` (see module).

  Args:
    h: [N, d] hidden states.
    kernel: [d, V] output projection (no bias, as the LM's head).
    targets: int [N], in [0, V).
    weights: float [N] (0 for padding). Not differentiated.
    block_rows: BN, rows per program (a power of two >= 16).
    block_vocab: BV, vocabulary columns per tile (a power of two >= 16).
    compute_dtype: matmul input dtype; products accumulate in float32.
    interpret: run in Pallas' interpreter; None = only on a CPU.
    num_warps, num_stages: Triton launch parameters.
    backward: None (the backward kernels launch as the forward: the four
      arguments above), or ((BN, BV, warps, stages) of the dh kernel, the
      same of the dW kernel): each kernel its own blocks and launch; a
      fifth entry in dh's splits its vocabulary as `vocab_splits` does.
    vocab_splits: the forward kernel's vocabulary split over this many
      programs per row block (a power of two; their online log-sum-exps
      merged after): more programs in flight for a GPU that one program
      per row block leaves idle.
    dh_in_forward: when differentiated, the forward kernel (then named
      "xent_forward_dh") also accumulates each row's softmax mean of W's
      columns, from which dh follows without the dh kernel's pass over
      the logits (4 logits-sized matmuls instead of 5; see module). The
      dh kernel's launch (`backward[0]`) is then unused. Undifferentiated
      calls (evaluation) run the plain forward kernel either way.
    flash_forward: with `dh_in_forward`, the differentiated forward is
      jax's FlashAttention-3 kernel (Hopper; `qkspec.training.
      flash_forward`) with (block_rows, block_vocab, num_stages,
      vocab_splits) as its (block_q, block_kv, max_concurrent_steps,
      splits), instead of the Triton "xent_forward_dh" kernel; off a GPU
      (`interpret`) its plain-jnp reference stands in.
    flash_dw: G > 0: dW from FlashAttention-3 too, in G token groups
      (`flash_forward.weight_grad`: the vocabulary as queries, the tokens
      as keys; block_rows, block_vocab and num_stages as its blocks)
      instead of the Triton dW kernel; 0: the Triton dW kernel.

  Returns:
    A float32 scalar; divide by `sum(weights)` for the mean.
  """
  static = (block_rows, block_vocab, compute_dtype, interpret, num_warps,
            num_stages, backward, vocab_splits, dh_in_forward, flash_forward,
            flash_dw)
  return _loss(h, kernel, targets, weights, static, False)[0]


def _blocks(h, kernel, targets, static) -> _Blocks:
  (block_rows, block_vocab, compute_dtype, interpret, num_warps, num_stages,
   backward, vocab_splits, *_) = static
  launch = launches(block_rows, block_vocab, num_warps, num_stages, backward,
                    vocab_splits)
  schema.check_pallas_kernels(*(launch[k] for k in KERNELS))
  return _Blocks(h, kernel, targets, kernel.shape[1], launch, compute_dtype,
                 interpret)


def _loss(h, kernel, targets, weights, static, differentiated):
  """(loss, residuals); the softmax mean of W among them when
  differentiated with `dh_in_forward` (static's third from last; the next,
  `flash_forward`, takes them from FlashAttention-3; the last,
  `flash_dw`, is the backward's)."""
  fused_xent.check_inputs(h, kernel, None, targets, weights)
  b = _blocks(h, kernel, targets, static)
  *_, in_forward, flash, _ = static
  if differentiated and in_forward and flash:
    bn, bv, _, stages, splits = b.launch["xent_forward"]
    lse, zy, *mean_w = flash_lib.forward(
        h, kernel, targets, (bn, bv, stages, splits),
        attention=flash_lib.reference_attention if b.interpret else None)
  else:
    lse, zy, *mean_w = _forward(b, differentiated and in_forward)
  loss = jnp.sum(weights.astype(jnp.float32) * (lse - zy))
  return loss, (h, kernel, targets, weights, lse, *mean_w)


def _fwd(h, kernel, targets, weights, *static):
  return _loss(h, kernel, targets, weights, static, True)


def _bwd(*args):
  *static, residuals, cotangent = args
  h, kernel, targets, weights, lse, *mean_w = residuals
  b = _blocks(h, kernel, targets, static)
  g = cotangent * weights.astype(jnp.float32)
  d_h = _dh_from_mean(b, mean_w[0], g) if mean_w else _dh(b, lse, g)
  if static[-1]:                      # flash_dw: its token groups
    bn, bv, _, stages, _ = b.launch["xent_forward"]
    d_kernel = flash_lib.weight_grad(
        h, kernel, targets, lse, g, (bn, bv, stages, static[-1]),
        attention=flash_lib.reference_attention if b.interpret else None)
  else:
    d_kernel = _dw(b, lse, g)
  return (d_h.astype(h.dtype), d_kernel.astype(kernel.dtype),
          *fused_xent.no_cotangents(targets, weights))


linear_cross_entropy.defvjp(_fwd, _bwd)
