r"""Batches built on the device: the token streams live there, not the batches.

Shapes: B=global batch, T=seq_len, N=tokens of a split, k=steps per call.

Each split's int32[N] stream is copied to the device once and the batches
of `qkspec.data.pipeline` are gathered there, bit for bit
(tests/training/device_feed_test.py): block j of s = [<eos>] + tokens holds
inputs s[jT : jT+T] and targets tokens[jT : jT+T]. For training the host sends
only the block ids, int32[k, B] for k steps (`pipeline.train_block_ids`,
whose permutation ranks 64-bit hashes, which a device without 64-bit
integers cannot); eval positions past N are padding (id 0, weight 0).
`TheoryFeed` gives the theory task's on-device batches the same form.
"""
# pylint: disable=invalid-name
import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

Batch = dict[str, jax.Array]


def train_batch_at(tokens_N: jax.Array, block_ids_B: jax.Array, *,
                   seq_len: int, eos_id: int) -> Batch:
  """{"inputs", "targets": int32[B, T]} of the (full) blocks
  `block_ids_B`, as `pipeline.train_batch`."""
  pos_BxT = (block_ids_B.astype(jnp.int32)[:, None] * seq_len
             + jnp.arange(seq_len, dtype=jnp.int32)[None, :])
  targets = tokens_N[pos_BxT]
  inputs = jnp.where(pos_BxT == 0, eos_id,
                     tokens_N[jnp.maximum(pos_BxT - 1, 0)])
  return {"inputs": inputs.astype(jnp.int32),
          "targets": targets.astype(jnp.int32)}


def eval_batch_at(tokens_N: jax.Array, index: jax.Array, *, seq_len: int,
                  batch_size: int, eos_id: int) -> Batch:
  """Eval batch `index` of a split, padded past its end, as
  `pipeline.eval_batch` (one host): {"inputs", "targets": int32[B, T],
  "weights": float32[B, T]}."""
  n = tokens_N.shape[0]
  rows_B = index * batch_size + jnp.arange(batch_size, dtype=jnp.int32)
  pos_BxT = (rows_B[:, None] * seq_len
             + jnp.arange(seq_len, dtype=jnp.int32)[None, :])
  valid = pos_BxT < n
  targets = jnp.where(valid, tokens_N[jnp.clip(pos_BxT, 0, n - 1)], 0)
  inputs = jnp.where(pos_BxT == 0, eos_id,
                     tokens_N[jnp.clip(pos_BxT - 1, 0, n - 1)])
  return {"inputs": jnp.where(valid, inputs, 0).astype(jnp.int32),
          "targets": targets.astype(jnp.int32),
          "weights": valid.astype(jnp.float32)}


@dataclasses.dataclass(frozen=True)
class LMFeed:
  """A language model's splits on the device (replicated, passed to the
  compiled functions as arguments, not constants) and its batch layout."""
  consts: jax.Array                       # int32[N_train], replicated
  eval_tokens: dict[str, jax.Array]       # split -> int32[N], replicated
  eval_counts: dict[str, int]             # split -> batches evaluated
  seq_len: int
  batch_size: int
  seed: int
  eos_id: int
  ids_sharding: Any                       # [k, B]: B on the data axis

  def train_inputs(self, start: int, k: int) -> jax.Array:
    """int32[k, B]: the block ids of global steps start .. start+k-1."""
    from qkspec.data import pipeline  # pylint: disable=g-import-not-at-top
    n = self.consts.shape[0]
    ids = np.stack([pipeline.train_block_ids(n, s, self.seq_len,
                                             self.batch_size, self.seed)
                    for s in range(start, start + k)]).astype(np.int32)
    rows = pipeline.host_rows(self.batch_size)
    return jax.make_array_from_process_local_data(self.ids_sharding,
                                                  ids[:, rows])

  def train_batch(self, tokens_N: jax.Array, ids_B: jax.Array) -> Batch:
    return train_batch_at(tokens_N, ids_B, seq_len=self.seq_len,
                          eos_id=self.eos_id)

  def eval_batch(self, tokens_N: jax.Array, index: jax.Array) -> Batch:
    return eval_batch_at(tokens_N, index, seq_len=self.seq_len,
                         batch_size=self.batch_size, eos_id=self.eos_id)


@dataclasses.dataclass(frozen=True)
class TheoryFeed:
  """The random-walk task: batch `step` is `sample(fold_in(key, step))`."""
  consts: jax.Array                       # the train key
  sample: Callable[[jax.Array], Batch]    # key -> batch (traceable)
  eval_counts: dict = dataclasses.field(default_factory=dict)  # none

  def train_inputs(self, start: int, k: int) -> jax.Array:
    return jnp.arange(start, start + k, dtype=jnp.int32)

  def train_batch(self, key: jax.Array, step: jax.Array) -> Batch:
    return self.sample(jax.random.fold_in(key, step))

