"""WikiText-2 input pipeline: tfds builder -> array_record -> token blocks.

B=global batch (all hosts), b=B/process_count rows per host, T=seq_len,
N=tokens in a split (one `<eos>` per line).

Blocks as fairseq's `--sample-break-mode none`: with s = [<eos>] + tokens,
block j has inputs s[jT : jT+T] and targets s[jT+1 : jT+T+1], so every
token of a split is a target exactly once. Training reads the floor(N/T)
full blocks in a splitmix64 permutation per epoch, floor(N/T) // B steps
per epoch: batch k is a pure function of (seed, k). Evaluation reads all
ceil(N/T) blocks in order, the last padded (id 0, weight 0).
"""
from __future__ import annotations

from collections.abc import Iterator
import dataclasses
import functools
import os

import jax
import ml_collections
import numpy as np

from qkspec.config import ConfigError

Batch = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class LMData:
  """A vocabulary and the three flat token streams (int32[N] each)."""
  vocab: tuple[str, ...]
  train: np.ndarray
  valid: np.ndarray
  test: np.ndarray

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  @property
  def eos_id(self) -> int:
    return self.vocab.index("<eos>")

  def split(self, name: str) -> np.ndarray:
    """The int32[N] stream of "train", "valid" or "test"."""
    return getattr(self, name)


def load_splits(config: ml_collections.ConfigDict, *,
                verify_checksums: bool = True) -> LMData:
  """Prepares `config.name` in `config.data_dir` if needed and reads it.

  The first call builds the array_record files (from `config.manual_dir`,
  else by downloading; checksums verified unless `verify_checksums=False`);
  later calls only read them. On several hosts, prepare once beforehand or
  give each host its `data_dir`. Raises ConfigError, in one line naming
  `manual_dir`, when a set `manual_dir` is no directory or lacks the files,
  or when the data set is not built and cannot be downloaded (at once, on
  an offline machine).
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from qkspec.data.wikitext2 import wikitext2  # pylint: disable=g-import-not-at-top

  data_dir = os.path.expanduser(config.data_dir) or None
  manual_dir = os.path.expanduser(config.manual_dir) or None
  if manual_dir and not os.path.isdir(manual_dir):
    raise ConfigError(wikitext2.expected_files(
        f"config.data.manual_dir={config.manual_dir!r}", "no such directory"))
  tfds.disable_progress_bar()
  builder = tfds.builder(config.name, data_dir=data_dir,
                         file_format="array_record",
                         verify_checksums=verify_checksums)
  built = os.path.isfile(os.path.join(builder.data_dir, "dataset_info.json"))
  if not built and not manual_dir:
    problem = wikitext2.download_problem()
    if problem:
      raise ConfigError(wikitext2.expected_files(
          "WikiText-2", f"not built in {builder.data_dir} and cannot be "
          f"downloaded ({problem})"))
  builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
      manual_dir=manual_dir, try_download_gcs=False))
  sources = builder.as_data_source()

  def stream(split: str) -> np.ndarray:
    src = sources[split]
    return np.concatenate([ex["ids"] for ex in src.__getitems__(
        range(len(src)))]).astype(np.int32)

  return LMData(vocab=tuple(builder.info.metadata["vocab"]),
                train=stream("train"), valid=stream("validation"),
                test=stream("test"))


def num_batches(num_tokens: int, seq_len: int, batch_size: int, *,
                train: bool) -> int:
  """Steps per epoch (train=True) or batches to cover a split (train=False)."""
  if train:
    return (num_tokens // seq_len) // batch_size
  return -(-num_tokens // (seq_len * batch_size))    # ceil(ceil(N / T) / B)


def host_rows(batch_size: int, process_index: int | None = None,
              process_count: int | None = None) -> slice:
  """This host's rows of a global batch (defaults: jax.process_index/count)."""
  p = jax.process_index() if process_index is None else process_index
  n = jax.process_count() if process_count is None else process_count
  if batch_size % n or not 0 <= p < n:
    raise ValueError(f"batch_size {batch_size} must split evenly over "
                     f"{n} hosts (process {p})")
  b = batch_size // n
  return slice(p * b, (p + 1) * b)


def _splitmix64(x: np.ndarray) -> np.ndarray:
  """A bijection of uint64 arrays (Steele et al., SplitMix64 finaliser)."""
  x = x + np.uint64(0x9E3779B97F4A7C15)
  x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
  x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
  return x ^ (x >> np.uint64(31))


@functools.lru_cache(maxsize=8)
def epoch_permutation(seed: int, epoch: int, num_blocks: int) -> np.ndarray:
  """int64[num_blocks]: the order of the train blocks in `epoch`."""
  base = _splitmix64(_splitmix64(np.array([seed], np.uint64))
                     ^ np.array([epoch], np.uint64))
  keys = _splitmix64(base ^ np.arange(num_blocks, dtype=np.uint64))
  perm = np.argsort(keys)  # keys are distinct: a bijection of distinct inputs
  perm.flags.writeable = False
  return perm


def _blocks(tokens: np.ndarray, eos_id: int, starts: np.ndarray,
            seq_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Blocks whose targets start at tokens[starts]: inputs, targets
  int32[R, T] and valid bool[R, T] (False past the end)."""
  pos = np.asarray(starts, np.int64)[:, None] + np.arange(seq_len)
  n = tokens.shape[0]
  valid = pos < n
  targets = np.where(valid, tokens[np.clip(pos, 0, n - 1)], 0)
  inputs = np.where(pos == 0, eos_id, tokens[np.clip(pos - 1, 0, n - 1)])
  inputs = np.where(valid, inputs, 0)
  return inputs.astype(np.int32), targets.astype(np.int32), valid


def train_block_ids(num_tokens: int, step: int, seq_len: int,
                    batch_size: int, seed: int) -> np.ndarray:
  """int64[B]: the train blocks of global batch `step`."""
  num_blocks = num_tokens // seq_len
  steps = num_batches(num_tokens, seq_len, batch_size, train=True)
  epoch, k = divmod(int(step), steps)
  perm = epoch_permutation(int(seed), epoch, num_blocks)
  return perm[k * batch_size:(k + 1) * batch_size]


def train_batch(data: LMData, step: int, *, seq_len: int, batch_size: int,
                seed: int, process_index: int | None = None,
                process_count: int | None = None) -> Batch:
  """This host's rows of train batch `step`: {"inputs", "targets"} [b, T]."""
  rows = host_rows(batch_size, process_index, process_count)
  ids = train_block_ids(data.train.shape[0], step, seq_len, batch_size, seed)
  inputs, targets, _ = _blocks(data.train, data.eos_id, ids[rows] * seq_len,
                               seq_len)
  return {"inputs": inputs, "targets": targets}


def eval_batch(data: LMData, split: str, index: int, *, seq_len: int,
               batch_size: int, process_index: int | None = None,
               process_count: int | None = None) -> Batch:
  """This host's rows of evaluation batch `index` of `split`, in order:
  {"inputs", "targets": int32[b, T], "weights": float32[b, T] (0: padding)}.
  """
  rows = host_rows(batch_size, process_index, process_count)
  tokens = data.split(split)
  global_rows = index * batch_size + np.arange(rows.start, rows.stop)
  inputs, targets, valid = _blocks(tokens, data.eos_id,
                                   global_rows * seq_len, seq_len)
  return {"inputs": inputs, "targets": targets,
          "weights": valid.astype(np.float32)}


def eval_batches(data: LMData, split: str, *, seq_len: int, batch_size: int,
                 process_index: int | None = None,
                 process_count: int | None = None) -> Iterator[Batch]:
  """All evaluation batches of `split`; together they weight each token once."""
  n = num_batches(data.split(split).shape[0], seq_len, batch_size,
                  train=False)
  for index in range(n):
    yield eval_batch(data, split, index, seq_len=seq_len,
                     batch_size=batch_size, process_index=process_index,
                     process_count=process_count)
