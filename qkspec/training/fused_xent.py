r"""Fused, chunked output projection + softmax cross-entropy with a custom VJP.

Shapes: N = tokens (batch x sequence, flattened), d = model width,
V = vocabulary, C = rows per chunk.

The language model's last step maps hidden states :math:`h \in \mathbb
R^{N \times d}` to logits :math:`z = hW + b \in \mathbb R^{N \times V}` and
takes the cross-entropy against targets :math:`y`:

.. math:: L = \sum_n w_n\,(\mathrm{logsumexp}(z_n) - z_{n, y_n}),\qquad
          \frac{\partial L}{\partial z_n} = w_n\,(\mathrm{softmax}(z_n)
          - e_{y_n}).

At the paper's LM size (N = 4096, V = 33,278) a plain implementation
materialises z and several same-sized temporaries (545 MB each) and runs the
matmuls in a backward pass that re-reads them. Here the loss is a scalar
leaf of the computation, so its gradient can be formed *during the forward
pass*:

1. Split the N rows into chunks of C (padding with zero-weight rows).
2. For each chunk (a `lax.scan`): :math:`z_c = h_c W + b`; the row maxima
   :math:`m`, :math:`e = \exp(z_c - m)` and :math:`s = \sum_v e`; the
   chunk's loss :math:`\sum_n w_n(\log s_n + m_n - z_{n,y_n})`; then
   :math:`g_c = e\,w/s - w\,\mathrm{onehot}(y_c)` (one fused elementwise
   pass: the one-hot is an iota comparison, not a scatter), and
   :math:`\partial h_c = g_c W^\top`,
   :math:`\partial W^\top \mathrel{+}= g_c^\top h_c`,
   :math:`\partial b \mathrel{+}= \sum_n g_c` (only when a bias is given).
3. The custom VJP's backward pass only scales the stored gradients by the
   incoming cotangent.

So the three matmuls of the plain forward+backward (z, dh, dW: 6NdV FLOPs)
run once each, with no recomputation, and only a [C, V] block of logits is
live at a time. The weight gradient is accumulated as [V, d] and transposed
once at the end: on XLA:CPU, :math:`g^\top h` runs about twice as fast as
:math:`h^\top g` at these shapes (bench/train_step.py). C is a tuning knob:
a block of C x V floats should stay in the last-level cache on a CPU
(C = 128 at V = 33,278 on the 2-core machines here), while a GPU prefers
large chunks (bench/gpu_fig6.sh probes 512 and 4096). The value and
gradients equal the plain `optax.softmax_cross_entropy_with_integer_labels`
path to float32 rounding (tests/fused_xent_test.py). Use
`chunked_cross_entropy` (no gradient work) for evaluation.

`logits_dtype` is where the [C, V] block lives between the matmul and the
softmax: float32 (default), or bfloat16, the matmul's float32 accumulator
rounded once at its output, as fairseq's `--fp16` training holds its FP16
logits before `log_softmax(..., dtype=float32)`; the statistics m, s, the
loss and g stay float32. On a GPU, where this step is bound by the block's
HBM traffic (bench/gpu_results.md: the reductions and the elementwise pass
that reads it), that halves the bytes; the value then equals the plain loss
of the rounded logits (tests), within ~1e-3 of the float32 one.
"""
import functools

import jax
import jax.numpy as jnp

from qkspec.theory import _checks


def pad_to(x, axis: int, size: int):
  """`x` zero-padded at the end of `axis` to `size` (also pallas_xent's)."""
  pad = size - x.shape[axis]
  if pad == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, pad)
  return jnp.pad(x, widths)


def round_up(n: int, block: int) -> int:
  """The smallest multiple of `block` >= n."""
  return -(-n // block) * block


def _chunks(h, targets, weights, chunk_size):
  """Pads to a multiple of C and reshapes to [num_chunks, C, ...]."""
  if chunk_size < 1:
    raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
  n = h.shape[0]
  c = min(chunk_size, n)
  rows = round_up(n, c)
  split = lambda x: pad_to(x, 0, rows).reshape((rows // c, c) + x.shape[1:])
  return split(h), split(targets), split(weights), n


def _chunk_logits(h_c, kernel, bias, compute_dtype, logits_dtype):
  z = jnp.dot(h_c.astype(compute_dtype), kernel.astype(compute_dtype),
              preferred_element_type=jnp.float32)
  z = z if bias is None else z + bias.astype(jnp.float32)[None, :]
  return z.astype(logits_dtype)


def _chunk_loss_and_grad(z, y, w):
  """(sum_n w_n CE(z_n, y_n), dL/dz) of one [C, V] block (module, step 2),
  in float32 whatever the block's dtype."""
  z = z.astype(jnp.float32)
  m = jnp.max(z, axis=-1, keepdims=True)
  e = jnp.exp(z - m)
  s = jnp.sum(e, axis=-1, keepdims=True)
  hit = jax.lax.broadcasted_iota(y.dtype, z.shape, 1) == y[:, None]
  g = e * (w[:, None] / s) - jnp.where(hit, w[:, None], 0.0)
  target = jnp.take_along_axis(z, y[:, None], axis=-1)[:, 0]
  loss = jnp.sum(w * (jnp.log(s[:, 0]) + m[:, 0] - target))
  return loss, g


def check_inputs(h, kernel, bias, targets, weights):
  """ValueError unless h [N, d], kernel [d, V], bias None or [V], targets
  and weights [N] (shared with `pallas_xent`)."""
  _checks.min_ndim("h", h, 2, "[N, d]")
  if h.ndim != 2 or kernel.ndim != 2 or h.shape[1] != kernel.shape[0]:
    raise ValueError(f"h [N, d] and kernel [d, V] do not match: {h.shape}, "
                     f"{kernel.shape}.")
  if bias is not None and bias.shape != (kernel.shape[1],):
    raise ValueError(f"bias must be None or [V] = [{kernel.shape[1]}], got "
                     f"{bias.shape}.")
  if targets.shape != h.shape[:1] or weights.shape != h.shape[:1]:
    raise ValueError(f"targets and weights must be [N] = [{h.shape[0]}], got "
                     f"{targets.shape} and {weights.shape}.")


def chunked_cross_entropy(h: jax.Array, kernel: jax.Array,
                          bias: jax.Array | None, targets: jax.Array,
                          weights: jax.Array, chunk_size: int = 128,
                          compute_dtype=jnp.float32,
                          logits_dtype=jnp.float32) -> jax.Array:
  """Weighted sum of token cross-entropies, chunked, forward only (eval)."""
  check_inputs(h, kernel, bias, targets, weights)
  h_k, y_k, w_k, _ = _chunks(h, targets, weights, chunk_size)

  def body(total, chunk):
    h_c, y_c, w_c = chunk
    z = _chunk_logits(h_c, kernel, bias, compute_dtype, logits_dtype)
    loss, _ = _chunk_loss_and_grad(z, y_c, w_c)   # XLA drops the unused grad
    return total + loss, None

  total, _ = jax.lax.scan(body, jnp.float32(0.0), (h_k, y_k, w_k))
  return total


KERNEL_GRAD_LAYOUTS = ("vd", "dv")


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6, 7, 8))
def fused_cross_entropy(h: jax.Array, kernel: jax.Array,
                        bias: jax.Array | None, targets: jax.Array,
                        weights: jax.Array, chunk_size: int = 128,
                        compute_dtype=jnp.float32,
                        kernel_grad: str = "vd",
                        logits_dtype=jnp.float32) -> jax.Array:
  r"""Weighted sum :math:`\sum_n w_n \mathrm{CE}(h_n W + b, y_n)`, fused (see module).

  Args:
    h: [N, d] hidden states (float32 or bfloat16).
    kernel: [d, V] output projection.
    bias: [V], or None for none (fairseq's LM output has none).
    targets: int [N].
    weights: float [N] (0 for padding). Not differentiated.
    chunk_size: rows per chunk C (memory ~ C x V floats; see module).
    compute_dtype: matmul input dtype (float32, or bfloat16 with float32
      accumulation).
    kernel_grad: how the kernel gradient is accumulated: "vd" as [V, d]
      (:math:`g^\top h`, transposed once at the end; fastest on XLA:CPU)
      or "dv" as [d, V] (:math:`h^\top g`), the layout a GPU may prefer
      (bench/gpu_paper.py probes it). Same values up to float rounding.
    logits_dtype: the [C, V] block's dtype between the matmul and the
      softmax: float32, or bfloat16 as fairseq's FP16 logits (see module).

  Returns:
    A float32 scalar; divide by `sum(weights)` for the mean.
  """
  if kernel_grad not in KERNEL_GRAD_LAYOUTS:
    raise ValueError(f"kernel_grad must be one of {KERNEL_GRAD_LAYOUTS}, got "
                     f"{kernel_grad!r}.")
  return chunked_cross_entropy(h, kernel, bias, targets, weights, chunk_size,
                               compute_dtype, logits_dtype)


def _fused_fwd(h, kernel, bias, targets, weights, chunk_size, compute_dtype,
               kernel_grad, logits_dtype):
  check_inputs(h, kernel, bias, targets, weights)
  if kernel_grad not in KERNEL_GRAD_LAYOUTS:
    raise ValueError(f"kernel_grad must be one of {KERNEL_GRAD_LAYOUTS}, got "
                     f"{kernel_grad!r}.")
  h_k, y_k, w_k, n = _chunks(h, targets, weights, chunk_size)
  kernel_c = kernel.astype(compute_dtype)

  def body(carry, chunk):
    total, d_kernel_t, d_bias = carry
    h_c, y_c, w_c = chunk
    loss, g = _chunk_loss_and_grad(
        _chunk_logits(h_c, kernel, bias, compute_dtype, logits_dtype), y_c,
        w_c)
    g_c = g.astype(compute_dtype)
    d_h = jnp.dot(g_c, kernel_c.T, preferred_element_type=jnp.float32)
    if kernel_grad == "vd":
      d_kernel_t = d_kernel_t + jnp.dot(g_c.T, h_c.astype(compute_dtype),
                                        preferred_element_type=jnp.float32)
    else:                       # accumulated as [d, V]
      d_kernel_t = d_kernel_t + jnp.dot(h_c.astype(compute_dtype).T, g_c,
                                        preferred_element_type=jnp.float32)
    if bias is not None:
      d_bias = d_bias + jnp.sum(g, axis=0)
    return (total + loss, d_kernel_t, d_bias), d_h

  d_bias = None if bias is None else jnp.zeros(bias.shape, jnp.float32)
  grad_shape = kernel.shape[::-1] if kernel_grad == "vd" else kernel.shape
  init = (jnp.float32(0.0), jnp.zeros(grad_shape, jnp.float32), d_bias)
  (total, d_kernel_t, d_bias), d_h = jax.lax.scan(body, init,
                                                  (h_k, y_k, w_k))
  d_h = d_h.reshape(-1, h.shape[1])[:n]
  d_kernel = d_kernel_t.T if kernel_grad == "vd" else d_kernel_t
  grads = (d_h.astype(h.dtype), d_kernel.astype(kernel.dtype),
           None if bias is None else d_bias.astype(bias.dtype))
  return total, (grads, targets, weights)


def no_cotangents(targets, weights):
  """Zero cotangents of the targets (float0 when integer) and weights."""
  zero_targets = (jnp.zeros(targets.shape, jax.dtypes.float0)
                  if jnp.issubdtype(targets.dtype, jnp.integer)
                  else jnp.zeros_like(targets))
  return zero_targets, jnp.zeros_like(weights)


def _fused_bwd(chunk_size, compute_dtype, kernel_grad, logits_dtype,
               residuals, cotangent):
  del chunk_size, compute_dtype, kernel_grad, logits_dtype
  (d_h, d_kernel, d_bias), targets, weights = residuals
  scale = lambda g: None if g is None else (cotangent * g).astype(g.dtype)
  return (scale(d_h), scale(d_kernel), scale(d_bias),
          *no_cotangents(targets, weights))


fused_cross_entropy.defvjp(_fused_fwd, _fused_bwd)
