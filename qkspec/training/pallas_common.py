"""What qkspec's Pallas (Triton) kernels share: where they run, their
blocks, their Triton settings and how they add a bias. `pallas_xent` (the
loss), `attention_kernel`, `norm_kernel`, `ffn_kernel`, `proj_norm_kernel`
and `qkv_attention_kernel` (the layers' GPU options) use these, so they
choose the interpreter, refuse a TPU and round the same way."""
from absl import logging
import jax
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp


def interpret_mode(interpret: bool | None, kernels: str, instead: str,
                   cpu_note: str = "") -> bool:
  """Whether `kernels` ("pallas_xent's kernels") run in Pallas' interpreter:
  `interpret`, or None: on a CPU only (logging `cpu_note`, if any, once).
  On a TPU, which has no Triton, compiled kernels are an error that names
  `instead`, the option to use there."""
  platform = jax.default_backend()
  if interpret is None:
    interpret = platform == "cpu"
    if interpret and cpu_note:
      logging.log_first_n(logging.WARNING, cpu_note, 1)
  if not interpret and platform == "tpu":
    raise NotImplementedError(
        f"{kernels} are written for Triton (GPU); on {platform!r} use "
        f"{instead}, or interpret=True to run them in Pallas' interpreter.")
  return interpret


def fitting_block(n: int, most: int, needs: str) -> int:
  """min(most, n), which must divide n; `needs` opens the error ("X
  needs the sequence length")."""
  block = min(most, n)
  if n % block:
    raise ValueError(f"{needs} to be a multiple of {most} or at most "
                     f"{most}, got {n}.")
  return block


def layer_params(width: int):
  """Triton's settings for a layer's kernel over tiles `width` wide: 8
  warps past 64 (as jax's attention example's forward; at 128 the
  attention's backward then needs ~130 registers a thread, not 255)."""
  return plgpu.CompilerParams(num_warps=4 if width <= 64 else 8,
                              num_stages=1)


def with_bias(t, b, dtype):
  """Tile t [R, D] plus the bias b ([D], loaded or a ref; rounded to the
  compute dtype first, as the XLA path adds it), in `dtype`; b None: t."""
  if b is None:
    return t
  b = b[...].astype(dtype).astype(jnp.float32)
  return (t.astype(jnp.float32) + b[None, :]).astype(dtype)
