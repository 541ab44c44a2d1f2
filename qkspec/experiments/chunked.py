"""A sweep over many points, one compiled call per fixed-size chunk.

Shapes: P = points, B = points per chunk. The last chunk repeats the last
point, so the function compiles once; a Python loop over chunks (a
`lax.map` in one jit hung on 2-core XLA:CPU) logs progress with an ETA.
"""
import time
from typing import Any, Callable, Sequence

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np


def pad_points(points: Sequence[np.ndarray], chunk: int
               ) -> tuple[list[np.ndarray], int]:
  """Pads [P, ...] arrays to a multiple of `chunk` rows; (arrays, chunks)."""
  num_p = len(points[0])
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
  """`fn(*points)` evaluated `chunk` points at a time: leaves [P, ...].

  `fn` (jitted) maps arrays [B, ...] to a pytree with leading axis B;
  `name` labels the progress log.
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
