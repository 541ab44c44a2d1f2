r"""The `synthetic` training task: Dong et al.'s sorting / memorisation.

Shapes: B = batch, T = tokens, V = vocabulary (= classes), N = memorised
sequences.

`config.task = "synthetic"` (dispatched by `qkspec.training.tasks.make_task`)
trains `qkspec.training.san_model.SANClassifier` on
`qkspec.data.synthetic` (`config.data.name`: "sorting" or "memorization")
with the mean token cross-entropy (`tasks.token_loss`), through the same
steps, sweeps and loop as the other tasks. Train batch k is a pure function
of (data.seed, k). The "valid" split is `data.eval_sequences` fresh sorting
sequences (a fixed key), or the memorised bank itself.
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.data import synthetic
from qkspec.training import model as model_lib
from qkspec.training import san_model
from qkspec.training import tasks


def _refuse_unsupported(m) -> None:
  """The SANClassifier has no LayerNorm, dropout, biases or causal mask."""
  if m.norm != "none" or m.dropout or m.attn_dropout or m.causal:
    raise ValueError("config.task='synthetic' trains a SAN without "
                     "LayerNorm, dropout or causal mask: set model.norm="
                     "'none', model.dropout=model.attn_dropout=0, "
                     "model.causal=False.")


def data_functions(data_config):
  """(train sampler key -> batch, eval batches [list]) of `data_config`.

  The train sampler draws B sequences (sorting) or B bank rows
  (memorisation); the eval batches cover `eval_sequences` fresh sorting
  sequences, or the whole bank.
  """
  dc = data_config
  T, B, V = dc.seq_len, dc.batch_size, dc.vocab_size
  if dc.name not in synthetic.TASKS:
    raise ValueError(f"config.data.name must be one of {synthetic.TASKS}, "
                     f"got {dc.name!r}.")
  data_key = jax.random.key(dc.seed)
  train_key, eval_key, bank_key = jax.random.split(data_key, 3)
  if dc.name == "sorting":
    sample = lambda key: synthetic.sorting(key, B, T, V)  # noqa: E731
    n = dc.eval_sequences
    full = synthetic.sorting(eval_key, n, T, V)
  else:
    bank = synthetic.memorization_bank(bank_key, dc.num_memorized, T, V)
    sample = lambda key: synthetic.memorization(key, bank, B)  # noqa: E731
    full = bank
  n = full["inputs"].shape[0]
  evals = [{k: v[i:i + B] for k, v in full.items()} for i in range(0, n, B)]
  return (lambda key: sample(jax.random.fold_in(train_key, key))), evals


def synthetic_task(config, batch_sharding, dtype) -> tasks.Task:
  """The `tasks.Task` of `config.task == "synthetic"`."""
  del dtype   # float32 throughout: the models are tiny
  _refuse_unsupported(config.model)
  dc = config.data
  sample, evals = data_functions(dc)
  sample_jit = jax.jit(sample, out_shardings=batch_sharding)
  evals = [jax.device_put(b) for b in evals]

  def train_batch(step):
    return sample_jit(step)

  def valid():
    yield from evals

  temperature = model_lib.attention_temperature(config.model)
  return tasks.Task(
      "synthetic",
      san_model.make_classifier(config.model, dc.vocab_size, dc.seq_len,
                                temperature),
      jnp.zeros((1, dc.seq_len), jnp.int32), train_batch, {"valid": valid},
      tasks.token_loss, False, temperature, dc.vocab_size,
      eval_sizes={"valid": len(evals)})
