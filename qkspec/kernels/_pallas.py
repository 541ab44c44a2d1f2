"""What the Pallas kernels share: where they run and their blocks."""
from absl import logging
import jax


def interpret() -> bool:
  """Whether the kernels run in Pallas' interpreter: on a CPU. On a TPU
  (the kernels are written for NVIDIA GPUs) an error."""
  platform = jax.default_backend()
  if platform == "tpu":
    raise NotImplementedError("the Pallas kernels are written for NVIDIA "
                              "GPUs; on a TPU use model.kernels='xla'.")
  if platform == "cpu":
    logging.log_first_n(logging.INFO, "model.kernels='pallas' on a CPU "
                        "runs Pallas' interpreter (slow); 'xla' is the "
                        "CPU path.", 1)
  return platform == "cpu"


def fitting_block(n: int, most: int, needs: str) -> int:
  """min(most, n), which must divide n; `needs` opens the error."""
  block = min(most, n)
  if n % block:
    raise ValueError(f"{needs} to be a multiple of {most} or at most "
                     f"{most}, got {n}.")
  return block
