r"""Dong et al.'s synthetic token tasks: sorting and memorisation.

Shapes: B = batch, T = tokens, V = vocabulary (= classes), N = memorised
sequences. Examples are {"inputs", "targets": [T] int32}, one class per
position; pure, jit-able functions of a PRNG key.

* sorting (Dong et al., Sec. 5.2, their `sort.py` with repeats): uniform
  inputs on {0, ..., V-1}, targets the same tokens sorted;
* memorisation (Sec. 5.2): a bank of N sequences of uniform inputs and
  independent uniform labels; batches draw rows with replacement.

References:
  Dong, Cordonnier, Loukas, Attention is Not All You Need: Pure Attention
  Loses Rank Doubly Exponentially with Depth, ICML 2021, arXiv:2103.03404.
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.theory import _checks

TASKS = ("sorting", "memorization")


def sorting(key: jax.Array, batch_size: int, seq_len: int, vocab_size: int
            ) -> dict[str, jax.Array]:
  r"""Sorting: inputs :math:`x \sim U\{0..V-1\}^T`, targets sort(x), [B, T]."""
  B = _checks.positive_int("batch_size", batch_size)
  T = _checks.positive_int("seq_len", seq_len)
  V = _checks.positive_int("vocab_size", vocab_size)
  x_BxT = jax.random.randint(key, (B, T), 0, V, dtype=jnp.int32)
  return {"inputs": x_BxT, "targets": jnp.sort(x_BxT, axis=-1)}


def memorization_bank(key: jax.Array, num_sequences: int, seq_len: int,
                      vocab_size: int) -> dict[str, jax.Array]:
  r"""The N sequences to memorise: {"inputs", "targets": [N, T] int32}."""
  N = _checks.positive_int("num_sequences", num_sequences)
  T = _checks.positive_int("seq_len", seq_len)
  V = _checks.positive_int("vocab_size", vocab_size)
  k_x, k_y = jax.random.split(key)
  return {"inputs": jax.random.randint(k_x, (N, T), 0, V, dtype=jnp.int32),
          "targets": jax.random.randint(k_y, (N, T), 0, V, dtype=jnp.int32)}


def memorization(key: jax.Array, bank: dict[str, jax.Array], batch_size: int
                 ) -> dict[str, jax.Array]:
  """A batch of B rows of `bank`, drawn uniformly with replacement."""
  B = _checks.positive_int("batch_size", batch_size)
  rows_B = jax.random.randint(key, (B,), 0, bank["inputs"].shape[0])
  return {k: v[rows_B] for k, v in bank.items()}


def token_accuracy(logits_BxTxV: jax.Array, targets_BxT: jax.Array
                   ) -> jax.Array:
  """Fraction of positions whose argmax class is the target (a scalar)."""
  return jnp.mean(jnp.argmax(logits_BxTxV, axis=-1) == targets_BxT)
