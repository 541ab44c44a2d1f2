"""Helpers shared by the tests (not a test file)."""
import functools
import json
import os
import pathlib
import shutil
import tempfile
import unittest

import jax
import numpy as np

from qkspec.config import defaults
from qkspec.theory import san

ROOT = pathlib.Path(__file__).resolve().parents[1]
SLOW = os.environ.get("QKSPEC_SLOW") == "1"
# The persistent compilation cache the tests and their child processes share.
CACHE_DIR = os.path.join(tempfile.gettempdir(), "qkspec_test_jax_cache")


def configure_jax() -> None:
  """The JAX settings every test runs under, made once: by conftest.py for
  pytest, and by the child processes that tests start. Rank promotion
  raises (a silent broadcast is a bug); compilations of 0.3 s or more are
  cached on disk."""
  jax.config.update("jax_numpy_rank_promotion", "raise")
  jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.3)


def slow(what: str):
  """Skips a long test (whole runs, several processes) unless QKSPEC_SLOW=1:
  CI runs the quick suite (under 5 minutes on 2 cores), BUILD.md says how
  to run all of it. `what`: what the test runs, for the skip message."""
  return unittest.skipUnless(SLOW, _slow_reason(what))


def skip_unless_slow(test: unittest.TestCase, what: str) -> None:
  """`slow` for one case of a parameterized test, called in its body."""
  if not SLOW:
    test.skipTest(_slow_reason(what))


def _slow_reason(what: str) -> str:
  return f"slow: {what}; QKSPEC_SLOW=1 runs it"


def get_config(name, arg=None):
  """`configs/<name>.py`'s get_config(arg), as `--config configs/<name>.py:arg`
  loads it."""
  return defaults.load_config_file(ROOT / "configs" / f"{name}.py", arg)


def jitted_san():
  """(san.init_params, san.forward), jit-compiled once per static signature
  (eager op-by-op dispatch is slow on a CPU)."""
  init = jax.jit(san.init_params, static_argnames=(
      "num_layers", "num_heads", "dim", "head_dim", "mlp_dim", "qk_init",
      "value_init"))
  return init, jax.jit(san.forward, static_argnames=("arch", "temperature"))


def workdir(test: unittest.TestCase) -> pathlib.Path:
  """A fresh, not yet existing workdir under a temp dir removed after `test`."""
  parent = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, parent, ignore_errors=True)
  return pathlib.Path(parent) / "run"


def assert_files(test: unittest.TestCase, directory, names) -> None:
  """Each of `names` is a non-empty file in `directory`."""
  for name in names:
    path = directory / name
    test.assertTrue(path.is_file(), f"missing {path}")
    test.assertGreater(path.stat().st_size, 0, f"empty {path}")


# The (eigen_mean, eigen_std) points of the grid_bases and grid_estimator
# tests, on the smoke grid's sizes (get_config("simulate_grid", "smoke")),
# so that every test shares its compiled functions.
GRID_MEANS = (0.0, 0.5, -0.3, 0.2)
GRID_STDS = (1.0, 0.05, 0.2, 3.0)

# The Flax attention models of the qkspec.for_flax tests: batch, sequence
# length, width and heads.
FLAX_B, FLAX_T, FLAX_D, FLAX_H = 3, 5, 8, 2


@functools.cache
def flax_nets() -> tuple[type, type]:
  """(LinenNet, NnxNet): two Flax attention layers with skips, `FLAX_H`
  heads on width `FLAX_D`. LinenNet(use_bias) stacks
  `nn.MultiHeadDotProductAttention` and sows its weights; NnxNet(rngs)
  stacks causal `nnx.MultiHeadAttention`. Imports flax only when used."""
  # pylint: disable=g-import-not-at-top
  import flax.linen as nn
  from flax import nnx

  class LinenNet(nn.Module):
    use_bias: bool = True

    @nn.compact
    def __call__(self, x, mask=None):
      for l in range(2):
        x = x + nn.MultiHeadDotProductAttention(
            FLAX_H, use_bias=self.use_bias, name=f"attn_{l}")(
                x, mask=mask, sow_weights=True)
      return x

  class NnxNet(nnx.Module):

    def __init__(self, rngs):
      self.layers = nnx.List([nnx.MultiHeadAttention(FLAX_H, FLAX_D,
                                                     decode=False, rngs=rngs)
                              for _ in range(2)])

    def __call__(self, x, mask=None, sow=False):
      for layer in self.layers:
        x = x + layer(x, mask=mask, is_causal=True, sow_weights=sow)
      return x

  return LinenNet, NnxNet


def flax_inputs() -> np.ndarray:
  """The for_flax tests' inputs [FLAX_B, FLAX_T, FLAX_D]."""
  return np.asarray(jax.random.normal(jax.random.key(1),
                                      (FLAX_B, FLAX_T, FLAX_D)))


def float64_tree(tree):
  """`tree` with each leaf a float64 NumPy array."""
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def sweep_losses(config, steps: int) -> tuple:
  """(its built steps, the per-member train losses of `steps` steps of
  `config`, a kappa sweep, one array per step); imports the training
  stack only when used."""
  # pylint: disable=g-import-not-at-top
  from qkspec.training import step as step_lib
  from qkspec.training import sweep as sweep_lib
  built = step_lib.build_steps(config)
  ik, dk, hp = step_lib.member_inputs(sweep_lib.members(config),
                                      sweep_lib.is_sweep(config))
  state, losses = built.init(ik, hp), []
  for i in range(steps):
    state, metrics = built.train(state, built.task.train_batch(i), dk)
    losses.append(np.asarray(metrics["loss"]))
  return built, losses


def metric_records(directory, drop=("steps_per_sec",)) -> list[dict]:
  """The records of `directory`/metrics.jsonl without the keys in `drop`
  (timings, which differ between equal runs)."""
  with open(pathlib.Path(directory) / "metrics.jsonl") as f:
    return [{k: v for k, v in json.loads(line).items() if k not in drop}
            for line in f]


def lm_batch(config, seed: int = 3) -> dict:
  """A fixed random LM batch of `config`'s shape: targets = inputs + 1."""
  tokens = jax.random.randint(jax.random.key(seed),
                              (config.data.batch_size, config.data.seq_len),
                              0, config.data.vocab_size)
  return {"inputs": tokens, "targets": (tokens + 1) % config.data.vocab_size}


def lm_task(model_config, vocab_size: int):
  """A `tasks.Task` of `model_config`'s LM, no data (for `summed_loss` and
  `layer_stats.measure` on batches made in the test)."""
  # pylint: disable=g-import-not-at-top
  from qkspec.training import model as model_lib
  from qkspec.training import tasks
  return tasks.Task("lm", model_lib.make_model(model_config, "lm", vocab_size),
                    None, None, {}, tasks.token_loss, model_config.causal,
                    model_lib.attention_temperature(model_config), vocab_size)


def grads_skipping_none(f, args) -> list:
  """Gradients of the scalar f(*args) by each of `args` that is not None
  (an absent bias), None in the others' places."""
  present = [i for i, a in enumerate(args) if a is not None]

  def of_present(*given):
    full = list(args)
    for i, a in zip(present, given):
      full[i] = a
    return f(*full)

  got = jax.grad(of_present, range(len(present)))(*[args[i] for i in present])
  out = [None] * len(args)
  for j, i in enumerate(present):
    out[i] = got[j]
  return out


def assert_grads_close(test, names, got, want, rtol=1e-4, atol=1e-4):
  """Each gradient of `got` close to `want`'s (None where want's is), and
  want's not all near zero (so the check can fail)."""
  for name, g, r in zip(names, got, want):
    if r is None:
      test.assertIsNone(g, name)
      continue
    np.testing.assert_allclose(g, r, rtol=rtol, atol=atol, err_msg=name)
    test.assertGreater(float(np.max(np.abs(r))), 0.1, name)
