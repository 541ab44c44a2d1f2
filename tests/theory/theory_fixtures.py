"""Fixtures of the theory tests: the grid points and the jitted SAN."""
import jax

from qkspec.theory import san

# The (eigen_mean, eigen_std) points of the grid_bases and grid_estimator
# tests, on the smoke grid's sizes (get_config("simulate_grid", "smoke")),
# so that every test shares its compiled functions.
GRID_MEANS = (0.0, 0.5, -0.3, 0.2)
GRID_STDS = (1.0, 0.05, 0.2, 3.0)


def jitted_san():
  """(san.init_params, san.forward), jit-compiled once per static signature
  (eager op-by-op dispatch is slow on a CPU)."""
  init = jax.jit(san.init_params, static_argnames=(
      "num_layers", "num_heads", "dim", "head_dim", "mlp_dim", "qk_init",
      "value_init"))
  return init, jax.jit(san.forward, static_argnames=("arch", "temperature"))
