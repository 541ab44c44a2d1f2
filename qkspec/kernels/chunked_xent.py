r"""Output projection + softmax cross-entropy, chunked, with a fused backward.

Shapes: N = tokens (batch x sequence, flattened), d = model width,
V = vocabulary, C = rows per chunk.

.. math:: L = \sum_n w_n\,(\mathrm{logsumexp}(z_n) - z_{n, y_n}),\qquad
          \frac{\partial L}{\partial z_n} = w_n\,(\mathrm{softmax}(z_n)
          - e_{y_n}),\qquad z = hW.

In XLA on any device: a `lax.scan` over chunks of C rows computes each
chunk's :math:`z_c = h_c W`, its loss and :math:`g_c = \partial L/\partial
z_c`, then :math:`\partial h_c = g_c W^\top` and accumulates
:math:`\partial W^\top \mathrel{+}= g_c^\top h_c`; the custom VJP's backward
scales them by the cotangent. Only a [C, V] block of logits is live at a
time (the [N, V] logits are 545 MB at the paper's size), and the three
matmuls run once each; without a gradient (evaluation) XLA drops the two
backward matmuls.
"""
import functools

import jax
import jax.numpy as jnp

CHUNK = 128    # rows per chunk


def pad_to(x, axis: int, size: int):
  """`x` zero-padded at the end of `axis` to `size`."""
  pad = size - x.shape[axis]
  if pad == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, pad)
  return jnp.pad(x, widths)


def round_up(n: int, block: int) -> int:
  """The smallest multiple of `block` >= n."""
  return -(-n // block) * block


def check_inputs(h, kernel, targets, weights) -> None:
  """ValueError unless h [N, d], kernel [d, V], targets and weights [N]."""
  if h.ndim != 2 or kernel.ndim != 2 or h.shape[1] != kernel.shape[0]:
    raise ValueError(f"h [N, d] and kernel [d, V] do not match: {h.shape}, "
                     f"{kernel.shape}.")
  if targets.shape != h.shape[:1] or weights.shape != h.shape[:1]:
    raise ValueError(f"targets and weights must be [N] = [{h.shape[0]}], got "
                     f"{targets.shape} and {weights.shape}.")


def no_cotangents(targets, weights):
  """Zero cotangents of the targets (float0 when integer) and weights."""
  zero_targets = (jnp.zeros(targets.shape, jax.dtypes.float0)
                  if jnp.issubdtype(targets.dtype, jnp.integer)
                  else jnp.zeros_like(targets))
  return zero_targets, jnp.zeros_like(weights)


def _chunk_loss_and_grad(h_c, kernel, y, w, compute_dtype):
  """(sum_n w_n CE(z_n, y_n), dL/dz) of one chunk, z in float32."""
  z = jnp.dot(h_c.astype(compute_dtype), kernel.astype(compute_dtype),
              preferred_element_type=jnp.float32)
  m = jnp.max(z, axis=-1, keepdims=True)
  e = jnp.exp(z - m)
  s = jnp.sum(e, axis=-1, keepdims=True)
  hit = jax.lax.broadcasted_iota(y.dtype, z.shape, 1) == y[:, None]
  g = e * (w[:, None] / s) - jnp.where(hit, w[:, None], 0.0)
  target = jnp.take_along_axis(z, y[:, None], axis=-1)[:, 0]
  loss = jnp.sum(w * (jnp.log(s[:, 0]) + m[:, 0] - target))
  return loss, g


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def fused_cross_entropy(h: jax.Array, kernel: jax.Array, targets: jax.Array,
                        weights: jax.Array, chunk: int = CHUNK,
                        compute_dtype=jnp.float32) -> jax.Array:
  r"""Float32 :math:`\sum_n w_n \mathrm{CE}(h_n W, y_n)`, fused (module).

  h [N, d], `kernel` [d, V] (no bias, as fairseq's LM head), `targets` int
  [N], `weights` float [N] (0 for padding; not differentiated); `chunk`
  rows per chunk (memory ~ C x V floats); `compute_dtype` the matmul
  inputs' (accumulation in float32).
  """
  return _fused_forward(h, kernel, targets, weights, chunk, compute_dtype)[0]


def _fused_forward(h, kernel, targets, weights, chunk, compute_dtype):
  check_inputs(h, kernel, targets, weights)
  if chunk < 1:
    raise ValueError(f"chunk must be >= 1, got {chunk}.")
  n = h.shape[0]
  c = min(chunk, n)
  rows = round_up(n, c)     # zero-padded to [rows / C, C, ...]
  split = lambda x: pad_to(x, 0, rows).reshape(  # noqa: E731
      (rows // c, c) + x.shape[1:])
  kernel_c = kernel.astype(compute_dtype)

  def body(carry, part):
    total, d_kernel_t = carry
    h_c, y_c, w_c = part
    loss, g = _chunk_loss_and_grad(h_c, kernel, y_c, w_c, compute_dtype)
    g_c = g.astype(compute_dtype)
    d_h = jnp.dot(g_c, kernel_c.T, preferred_element_type=jnp.float32)
    d_kernel_t = d_kernel_t + jnp.dot(g_c.T, h_c.astype(compute_dtype),
                                      preferred_element_type=jnp.float32)
    return (total + loss, d_kernel_t), d_h

  init = (jnp.float32(0.0), jnp.zeros(kernel.shape[::-1], jnp.float32))
  (total, d_kernel_t), d_h = jax.lax.scan(
      body, init, (split(h), split(targets), split(weights)))
  d_h = d_h.reshape(-1, h.shape[1])[:n]
  grads = (d_h.astype(h.dtype), d_kernel_t.T.astype(kernel.dtype))
  return total, (grads, targets, weights)


def _fused_backward(chunk, compute_dtype, residuals, cotangent):
  del chunk, compute_dtype
  (d_h, d_kernel), targets, weights = residuals
  scale = lambda g: (cotangent * g).astype(g.dtype)   # noqa: E731
  return (scale(d_h), scale(d_kernel), *no_cotangents(targets, weights))


fused_cross_entropy.defvjp(_fused_forward, _fused_backward)
