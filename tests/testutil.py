"""Helpers shared by the tests (not a test file)."""
import pathlib

import jax

from qkspec.config import defaults
from qkspec.theory import san

ROOT = pathlib.Path(__file__).resolve().parents[1]


def get_config(name, arg=None):
  """`configs/<name>.py`'s get_config(arg), as `--config configs/<name>.py:arg`."""
  return defaults.load_config_file(ROOT / "configs" / f"{name}.py", arg)


def jitted_san():
  """(san.init_params, san.forward), jit-compiled once per static signature
  (eager op-by-op dispatch is slow on a CPU)."""
  init = jax.jit(san.init_params, static_argnames=(
      "num_layers", "num_heads", "dim", "head_dim", "mlp_dim", "qk_init",
      "value_init"))
  return init, jax.jit(san.forward, static_argnames=("arch", "temperature"))
