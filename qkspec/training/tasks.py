r"""What is learned: Sec. 2's random-walk regression, Sec. 7's LM, Dong's tasks.

Shapes: B=batch, T=tokens, d=width, V=vocab.

A `Task` bundles the model, batches that are pure functions of (data seed,
step), so a resumed run sees the same data, and a loss as (sum, weight), so
that means over sharded and padded batches are exact:

* theory: :math:`J = \tfrac12 E\|x_{T+1} - F(X)_T\|^2` on Gaussian random
  walks (Assumption 1), sampled on the device;
* lm: token cross-entropy on WikiText-2 or a synthetic bigram stream;
* synthetic: Dong et al.'s sorting or memorisation, a
  `san_model.SANClassifier` (valid: fresh sorting sequences, or the bank).
"""
# pylint: disable=invalid-name
import dataclasses
import itertools
from typing import Callable, Iterator

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from qkspec.config import ConfigError
from qkspec.data import synthetic
from qkspec.theory import randomwalk
from qkspec.training import device_feed
from qkspec.training import model as model_lib
from qkspec.training import san_model

Batch = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Task:
  kind: str                                   # "theory", "lm" or "synthetic"
  model: nn.Module
  example_inputs: jax.Array                   # for model.init
  train_batch: Callable[[int], Batch]         # step -> global, sharded batch
  eval_splits: dict[str, Callable[[], Iterator[Batch]]]
  loss: Callable[[jax.Array, Batch], tuple[jax.Array, jax.Array]]
  causal: bool
  temperature: float                          # lambda of every attention layer
  vocab_size: int | None = None
  eval_sizes: dict[str, int] = dataclasses.field(
      default_factory=dict)                   # batches per eval split
  # The same batches built on the device (qkspec.training.device_feed).
  feed: device_feed.LMFeed | device_feed.TheoryFeed | None = None

  def summed_loss(self, params, batch: Batch, *, deterministic: bool,
                  rngs=None, mutable=False):
    """(weighted loss sum, weight) of `batch`, or with `mutable` (e.g.
    ["intermediates"]) `((sum, weight), state)`; the LM's runs inside the
    model (`OutputHead`)."""
    variables = {"params": params}
    if self.kind == "lm":
      return self.model.apply(variables, batch["inputs"], deterministic,
                              batch["targets"], batch.get("weights"),
                              rngs=rngs, mutable=mutable)
    out = self.model.apply(variables, batch["inputs"],
                           deterministic=deterministic, rngs=rngs,
                           mutable=mutable)
    if mutable:
      return self.loss(out[0], batch), out[1]
    return self.loss(out, batch)


def squared_loss(outputs_BxTxd: jax.Array, batch: Batch):
  r""":math:`\tfrac12\|y - F(X)_T\|^2` summed over the batch (Sec. 2), and B."""
  err_Bxd = batch["targets"] - outputs_BxTxd[:, -1, :]
  per_seq_B = 0.5 * jnp.sum(err_Bxd**2, axis=-1)
  w_B = batch.get("weights", jnp.ones_like(per_seq_B))
  return jnp.sum(per_seq_B * w_B), jnp.sum(w_B)


def token_loss(logits_BxTxV: jax.Array, batch: Batch):
  """Token cross-entropy in nats summed over weighted tokens, and the weight."""
  ce_BxT = optax.softmax_cross_entropy_with_integer_labels(
      logits_BxTxV, batch["targets"])
  w_BxT = batch.get("weights", jnp.ones_like(ce_BxT))
  return jnp.sum(ce_BxT * w_BxT), jnp.sum(w_BxT)


# ---------------------------------------------------------------- theory ----

def _theory_task(config, batch_sharding, dtype) -> Task:
  d, T, B = config.model.d_model, config.data.seq_len, config.data.batch_size
  train_key, eval_key = jax.random.split(jax.random.key(config.data.seed))
  cov = None
  if config.data.cov == "anisotropic":
    cov = randomwalk.anisotropic_covariance(
        jax.random.fold_in(eval_key, 1), d)

  def sample(key):
    x_BxT1xd = randomwalk.random_walk(key, B, T + 1, d, cov)
    return {"inputs": x_BxT1xd[:, :T], "targets": x_BxT1xd[:, T]}

  sample_jit = jax.jit(sample, out_shardings=batch_sharding)

  def train_batch(step):
    return sample_jit(jax.random.fold_in(train_key, step))

  num_valid = -(-config.data.eval_sequences // B)   # batches

  def valid():
    for i in range(num_valid):
      yield sample_jit(jax.random.fold_in(eval_key, 1000 + i))

  return Task(kind="theory",
              model=model_lib.make_model(config.model, "theory", dtype=dtype),
              example_inputs=jnp.zeros((1, T, d), jnp.float32),
              train_batch=train_batch, eval_splits={"valid": valid},
              loss=squared_loss, causal=config.model.causal,
              temperature=model_lib.attention_temperature(config.model),
              eval_sizes={"valid": num_valid},
              feed=device_feed.TheoryFeed(train_key, sample))


# -------------------------------------------------------------------- lm ----

def synthetic_stream(seed: int, num_tokens: int, vocab_size: int,
                     fanout: int = 3) -> np.ndarray:
  """A random bigram chain for smoke tests: each token has `fanout` likely
  successors (entropy about log(fanout) nats)."""
  rng = np.random.default_rng(seed)
  succ = rng.integers(0, vocab_size, size=(vocab_size, fanout))
  choice = rng.integers(0, fanout, size=num_tokens)
  noise = rng.random(num_tokens) < 0.1
  rand = rng.integers(0, vocab_size, size=num_tokens)
  out = np.empty(num_tokens, np.int32)
  tok = 0
  for i in range(num_tokens):
    tok = rand[i] if noise[i] else succ[tok, choice[i]]
    out[i] = tok
  return out


def load_lm_data(config):
  """`qkspec.data.LMData` for `config.data`: bigram streams over
  `vocab_size` tokens (the last `<eos>`) if `name` is "synthetic";
  `verify_checksums=False` (test fixtures) skips the sha256 check."""
  from qkspec.data import pipeline as data_lib  # pylint: disable=g-import-not-at-top
  dc = config.data
  if dc.name != "synthetic":
    return data_lib.load_splits(
        dc, verify_checksums=dc.get("verify_checksums", True))
  v = dc.vocab_size
  vocab = tuple(f"w{i}" for i in range(v - 1)) + ("<eos>",)
  train, valid, test = (synthetic_stream(dc.seed + i, n, v) for i, n in
                        enumerate((dc.train_tokens, dc.eval_tokens,
                                   dc.eval_tokens)))
  return data_lib.LMData(vocab=vocab, train=train, valid=valid, test=test)


def _lm_task(config, batch_sharding, dtype) -> Task:
  from qkspec.data import pipeline as data_lib  # pylint: disable=g-import-not-at-top
  dc = config.data
  data = load_lm_data(config)
  T, B = dc.seq_len, dc.batch_size
  if data.train.shape[0] // T < B:
    raise ConfigError(
        f"data.seq_len={T} x data.batch_size={B} is longer than the train "
        f"split ({data.train.shape[0]} tokens): not one batch fits.")
  if min(data.valid.shape[0], data.test.shape[0]) < 1:
    raise ConfigError("data: the valid/test splits are empty.")

  def put(local):
    return {k: jax.make_array_from_process_local_data(batch_sharding, v)
            for k, v in local.items()}

  def train_batch(step):
    return put(data_lib.train_batch(data, step, seq_len=T, batch_size=B,
                                    seed=dc.seed))

  def eval_size(split):
    n = data_lib.num_batches(data.split(split).shape[0], T, B, train=False)
    return min(n, config.eval_max_batches or n)

  def make_eval(split):
    def it():
      batches = data_lib.eval_batches(data, split, seq_len=T, batch_size=B)
      return map(put, itertools.islice(batches, eval_sizes[split]))
    return it

  eval_sizes = {s: eval_size(s) for s in ("valid", "test")}
  mesh = batch_sharding.mesh
  replicated = jax.NamedSharding(mesh, jax.P())

  def on_device(tokens):
    return jax.make_array_from_process_local_data(
        replicated, np.asarray(tokens, np.int32))

  feed = device_feed.LMFeed(
      consts=on_device(data.train),
      eval_tokens={s: on_device(data.split(s)) for s in eval_sizes},
      eval_counts=eval_sizes, seq_len=T, batch_size=B, seed=dc.seed,
      eos_id=data.eos_id,
      ids_sharding=jax.NamedSharding(mesh, jax.P(None, *batch_sharding.spec)))
  return Task(kind="lm",
              model=model_lib.make_model(config.model, "lm", data.vocab_size,
                                         dtype),
              example_inputs=jnp.zeros((1, T), jnp.int32),
              train_batch=train_batch,
              eval_splits={"valid": make_eval("valid"),
                           "test": make_eval("test")},
              loss=token_loss, causal=config.model.causal,
              temperature=model_lib.attention_temperature(config.model),
              vocab_size=data.vocab_size, eval_sizes=eval_sizes, feed=feed)


# ------------------------------------------------------------- synthetic ----

def data_functions(data_config):
  """(train sampler key -> batch, eval batches [list]) of `data_config`:
  B sorting sequences or bank rows; `eval_sequences` fresh sorting
  sequences, or the whole bank."""
  dc = data_config
  T, B, V = dc.seq_len, dc.batch_size, dc.vocab_size
  train_key, eval_key, bank_key = jax.random.split(jax.random.key(dc.seed), 3)
  if dc.name == "sorting":
    sample = lambda key: synthetic.sorting(key, B, T, V)  # noqa: E731
    full = synthetic.sorting(eval_key, dc.eval_sequences, T, V)
  else:
    bank = synthetic.memorization_bank(bank_key, dc.num_memorized, T, V)
    sample = lambda key: synthetic.memorization(key, bank, B)  # noqa: E731
    full = bank
  n = full["inputs"].shape[0]
  evals = [{k: v[i:i + B] for k, v in full.items()} for i in range(0, n, B)]
  return (lambda key: sample(jax.random.fold_in(train_key, key))), evals


def _synthetic_task(config, batch_sharding, dtype) -> Task:
  del dtype   # float32 throughout: the models are tiny
  m, dc = config.model, config.data
  if m.norm != "none" or m.dropout or m.attn_dropout or m.causal:
    raise ConfigError("config.task='synthetic' trains a SAN without "
                      "LayerNorm, dropout or causal mask: set model.norm="
                      "'none', model.dropout=model.attn_dropout=0, "
                      "model.causal=False.")
  sample, evals = data_functions(dc)
  train_batch = jax.jit(sample, out_shardings=batch_sharding)
  evals = [jax.device_put(b) for b in evals]
  temperature = model_lib.attention_temperature(config.model)
  return Task(
      kind="synthetic",
      model=san_model.make_classifier(config.model, dc.vocab_size,
                                      dc.seq_len, temperature),
      example_inputs=jnp.zeros((1, dc.seq_len), jnp.int32),
      train_batch=train_batch, eval_splits={"valid": lambda: iter(evals)},
      loss=token_loss, causal=False, temperature=temperature,
      vocab_size=dc.vocab_size, eval_sizes={"valid": len(evals)})


def make_task(config, batch_sharding) -> Task:
  """The task of `config.task`, its batches laid out with `batch_sharding`."""
  make = {"theory": _theory_task, "lm": _lm_task,
          "synthetic": _synthetic_task}[config.task]
  return make(config, batch_sharding, jnp.dtype(config.compute_dtype))
