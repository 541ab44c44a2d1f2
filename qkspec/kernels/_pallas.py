"""What the Pallas kernels share: where they run, their blocks, their launch."""
from absl import logging
import jax
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp


def interpret_mode(interpret: bool | None, kernels: str) -> bool:
  """Whether `kernels` (named in messages) run in Pallas' interpreter:
  `interpret`, or None: on a CPU only. Compiled on a TPU: an error."""
  platform = jax.default_backend()
  if interpret is None:
    interpret = platform == "cpu"
    if interpret:
      logging.log_first_n(logging.INFO, "model.kernels='pallas' on a CPU "
                          "runs Pallas' interpreter (slow); 'xla' is the "
                          "CPU path.", 1)
  if not interpret and platform == "tpu":
    raise NotImplementedError(
        f"{kernels} are written for NVIDIA GPUs; on {platform!r} use "
        "model.kernels='xla' (or interpret=True to run them in Pallas' "
        "interpreter).")
  return interpret


def fitting_block(n: int, most: int, needs: str) -> int:
  """min(most, n), which must divide n; `needs` opens the error."""
  block = min(most, n)
  if n % block:
    raise ValueError(f"{needs} to be a multiple of {most} or at most "
                     f"{most}, got {n}.")
  return block


def layer_params(width: int):
  """Triton's launch for tiles `width` wide: 8 warps past 64."""
  return plgpu.CompilerParams(num_warps=4 if width <= 64 else 8,
                              num_stages=1)


def with_bias(t, b, dtype):
  """Tile t [R, D] plus the bias ref b [D] (rounded to `dtype` first, as
  XLA adds it), in `dtype`; b None: t."""
  if b is None:
    return t
  b = b[...].astype(dtype).astype(jnp.float32)
  return (t.astype(jnp.float32) + b[None, :]).astype(dtype)
