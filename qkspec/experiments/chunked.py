"""A sweep over many points, one compiled call per fixed-size chunk.

Shapes: P = points, B = points per chunk.

The grid experiments (`simulate_grid`, `spectrum_collapse`) evaluate a
jit-compiled function of a batch of points on chunks of B points: the last
chunk is padded by repeating the last point, so every call has the same
shapes and the function compiles once; the padding is cut off again. A
Python loop over the chunks (rather than a `lax.map` inside one jit, which
hung with idle threads on the XLA CPU backend of our 2-core machines) also
gives a progress line with the elapsed time and an ETA per chunk.
"""
import time
from typing import Any, Callable, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np


def pad_points(points: Sequence[np.ndarray], chunk: int
               ) -> tuple[list[np.ndarray], int]:
  """Pads [P, ...] arrays to a multiple of `chunk` rows (last row repeated).

  Returns:
    (padded arrays, number of chunks).
  """
  num_p = len(points[0])
  if num_p == 0 or chunk < 1:
    raise ValueError(f"need >= 1 point and chunk >= 1, got {num_p} points "
                     f"and chunk {chunk}.")
  if any(len(a) != num_p for a in points):
    raise ValueError(f"every point array needs {num_p} rows, got "
                     f"{[len(a) for a in points]}.")
  num_chunks = -(-num_p // chunk)
  pad = num_chunks * chunk - num_p
  padded = [np.concatenate([a, np.repeat(a[-1:], pad, axis=0)])
            for a in map(np.asarray, points)]
  return padded, num_chunks


def map_chunks(fn: Callable[..., Any], points: Sequence[np.ndarray],
               chunk: int, name: str) -> Any:
  """`fn(*points)` evaluated `chunk` points at a time, as numpy arrays.

  Args:
    fn: a function of arrays [B, ...] (one per entry of `points`) returning
      a pytree of arrays with leading axis B (compile it once, e.g. with
      `jax.jit`: every call has B = `chunk` points).
    points: arrays [P, ...] with the same P.
    chunk: B, points per call.
    name: the experiment, for the progress log.

  Returns:
    The pytree of `fn`, each leaf the concatenation [P, ...] over the chunks
    (padding removed), as numpy arrays.
  """
  num_p = len(points[0])
  padded, num_chunks = pad_points(points, chunk)
  parts = []
  start = time.perf_counter()
  for i in range(num_chunks):
    sl = slice(i * chunk, (i + 1) * chunk)
    parts.append(jax.tree.map(np.asarray,
                              fn(*[jnp.asarray(a[sl]) for a in padded])))
    elapsed = time.perf_counter() - start
    logging.info("%s: chunk %d/%d (%3.0f%%, points %d-%d of %d), %.1f s "
                 "elapsed, ETA %.1f s", name, i + 1, num_chunks,
                 100 * (i + 1) / num_chunks, sl.start,
                 min(sl.stop, num_p) - 1, num_p, elapsed,
                 elapsed / (i + 1) * (num_chunks - i - 1))
  return jax.tree.map(lambda *a: np.concatenate(a)[:num_p], *parts)
