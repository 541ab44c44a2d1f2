"""Argument checks shared by the pure functions.

Shape checks always run (shapes are static under `jit`); value checks run
only on concrete values, as a traced one cannot be inspected.
"""
from typing import Any, Callable

import jax
import numpy as np
from numpy.lib.array_utils import normalize_axis_index


def is_concrete(x: Any) -> bool:
  """True if `x` holds a value now (not a tracer inside jit/vmap/grad)."""
  return not isinstance(x, jax.core.Tracer)


def positive_int(name: str, value: Any, minimum: int = 1) -> int:
  """`value` as an int; raises ValueError if it is below `minimum`."""
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
    raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
  if value < minimum:
    raise ValueError(f"{name} must be >= {minimum}, got {value}.")
  return int(value)


def _entries(name: str, value: Any, ok: Callable[[np.ndarray], Any],
             what: str) -> None:
  """Raises ValueError if a concrete `value` has an entry failing `ok` (NaN
  fails every comparison)."""
  if value is None or not is_concrete(value):
    return
  if not np.all(ok(np.asarray(value, dtype=np.float64))):
    raise ValueError(f"{name} must {what}, got {value!r}.")


def nonnegative(name: str, value: Any) -> None:
  _entries(name, value, lambda a: a >= 0, "be non-negative")


def positive(name: str, value: Any) -> None:
  _entries(name, value, lambda a: a > 0, "be positive")


def unit_interval(name: str, value: Any) -> None:
  _entries(name, value, lambda a: (a >= 0) & (a <= 1), "lie in [0, 1]")


def square_matrix(name: str, x: Any, dim: int | None = None) -> None:
  """Raises ValueError unless `x` is [..., n, n] (with n == dim if set)."""
  shape = np.shape(x)
  if len(shape) < 2 or shape[-1] != shape[-2]:
    raise ValueError(f"{name} must be a square matrix [..., n, n], got shape "
                     f"{tuple(shape)}.")
  if dim is not None and shape[-1] != dim:
    raise ValueError(f"{name} must be {dim} x {dim} to match the token "
                     f"dimension, got shape {tuple(shape)}.")


def min_ndim(name: str, x: Any, ndim: int, legend: str) -> None:
  if np.ndim(x) < ndim:
    raise ValueError(f"{name} must have shape {legend}, got shape "
                     f"{tuple(np.shape(x))}.")


def seq_axis_length(name: str, x: Any, axis: int, minimum: int = 2) -> int:
  """Length of `axis` of `x`; raises ValueError if it is below `minimum`."""
  n = np.shape(x)[normalize_axis_index(axis, np.ndim(x), msg_prefix=name)]
  if n < minimum:
    raise ValueError(f"{name} needs at least {minimum} entries along axis "
                     f"{axis} (the sequence), got {n}.")
  return n


def choice(name: str, value: Any, options: tuple[str, ...]) -> str:
  if value not in options:
    raise ValueError(f"{name} must be one of {options}, got {value!r}.")
  return value


def covariance(name: str, cov: Any, tol: float = 1e-5) -> None:
  """Raises ValueError unless a concrete `cov` is symmetric PSD [..., d, d].

  Tolerances are relative to the largest entry / eigenvalue: the Fig. 5
  covariance has float32 eigenvalues down to ~1e-6.
  """
  if not is_concrete(cov):
    return
  arr = np.asarray(cov, dtype=np.float64)
  if not np.all(np.isfinite(arr)):
    raise ValueError(f"{name} must be finite, got {cov!r}.")
  size = np.max(np.abs(arr), initial=0.0)
  if np.any(np.abs(arr - np.swapaxes(arr, -1, -2)) > tol * size):
    raise ValueError(f"{name} must be symmetric (a covariance), got {cov!r}.")
  evals = np.linalg.eigvalsh(arr)
  if np.any(evals < -tol * np.max(np.abs(evals), initial=0.0)):
    raise ValueError(f"{name} must be positive semi-definite (a covariance), "
                     f"its smallest eigenvalue is {evals.min():.3g}.")


def probabilities(name: str, probs: Any, mask: Any, tol: float = 1e-3
                  ) -> None:
  """Raises ValueError unless concrete `probs` [..., keys] are rows of
  probabilities over the keys where `mask` is True (all if None): no
  negative entry, and every row with a visible key sums to 1 within `tol`
  (16-bit probabilities need a looser one). NaN passes.
  """
  if not (is_concrete(probs) and is_concrete(mask)):
    return
  arr = np.asarray(probs, dtype=np.float64)
  visible = np.broadcast_to(np.asarray(True if mask is None else mask, bool),
                            arr.shape)
  if np.any(visible & (arr < 0)):
    raise ValueError(f"{name} must be non-negative (probabilities), got a "
                     f"minimum of {arr[visible].min():.3g}.")
  sums = np.sum(np.where(visible, arr, 0.0), axis=-1)
  bad = np.any(visible, axis=-1) & (np.abs(sums - 1.0) > tol)
  if np.any(bad):
    raise ValueError(f"{name} rows must sum to 1 over the visible keys "
                     f"(within {tol:.2g}), got a row sum of "
                     f"{sums[bad].flat[0]:.6g}: probabilities, not logits?")
