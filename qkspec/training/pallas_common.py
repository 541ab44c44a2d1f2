"""What qkspec's Pallas (Triton) kernels share: where they run and their
blocks. `pallas_xent` (the loss), `attention_kernel` and `norm_kernel` (the
layers' GPU options) use these, so they choose the interpreter and refuse
a TPU the same way."""
from absl import logging
import jax


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
