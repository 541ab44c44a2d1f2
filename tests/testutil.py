"""Helpers shared by the tests (not a test file)."""
import functools
import json
import math
import os
import pathlib
import shutil
import tempfile
import unittest

from absl import logging
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
# length, width, heads and stacked layers.
FLAX_B, FLAX_T, FLAX_D, FLAX_H, FLAX_L = 3, 5, 8, 2, 2


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


@functools.cache
def flax_stacks() -> tuple[type, type, type]:
  """(LinenScan, LinenRemat, NnxScan): `FLAX_L` attention layers with skips,
  `FLAX_H` heads on width `FLAX_D`. LinenScan(remat) is `nn.scan` over a
  block (its kernels [L, d, H, D] under "layers/attn"), each block
  `nn.remat`'d if `remat`; LinenRemat `nn.remat`s each of its blocks
  "block_l"; NnxScan(rngs) builds its layers with `nnx.vmap` and runs them
  with `nnx.scan` (kernels [L, d, H, D] under "layers"). Each takes
  (x, mask=None)."""
  # pylint: disable=g-import-not-at-top
  import flax.linen as nn
  from flax import nnx

  class Block(nn.Module):
    @nn.compact
    def __call__(self, x, mask):
      return x + nn.MultiHeadDotProductAttention(FLAX_H, name="attn")(
          x, mask=mask), None

  class LinenScan(nn.Module):
    remat: bool = False

    @nn.compact
    def __call__(self, x, mask=None):
      block = nn.remat(Block) if self.remat else Block
      x, _ = nn.scan(block, variable_axes={"params": 0},
                     split_rngs={"params": True}, in_axes=nn.broadcast,
                     length=FLAX_L)(name="layers")(x, mask)
      return x

  class LinenRemat(nn.Module):
    @nn.compact
    def __call__(self, x, mask=None):
      for l in range(FLAX_L):
        x, _ = nn.remat(Block)(name=f"block_{l}")(x, mask)
      return x

  class NnxScan(nnx.Module):

    def __init__(self, rngs):
      @nnx.split_rngs(splits=FLAX_L)
      @nnx.vmap(in_axes=(0,), out_axes=0)
      def layers(rngs):
        return nnx.MultiHeadAttention(FLAX_H, FLAX_D, decode=False,
                                      rngs=rngs)
      self.layers = layers(rngs)

    def __call__(self, x, mask=None):
      @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
      def body(x, layer):
        return x + layer(x, mask=mask, is_causal=True)
      return body(x, self.layers)

  return LinenScan, LinenRemat, NnxScan


def flax_inputs() -> np.ndarray:
  """The for_flax tests' inputs [FLAX_B, FLAX_T, FLAX_D]."""
  return np.asarray(jax.random.normal(jax.random.key(1),
                                      (FLAX_B, FLAX_T, FLAX_D)))


def float64_tree(tree):
  """`tree` with each leaf a float64 NumPy array."""
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def assert_close(what: str, got, want, rtol=0.0, atol=0.0) -> None:
  """np.testing.assert_allclose, logging the largest difference (shown by
  `pytest ... -o log_cli=true --log-cli-level=INFO`)."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  diff = np.abs(got - want)
  with np.errstate(divide="ignore", invalid="ignore"):
    relative = np.nanmax(np.where(diff > 0, diff / np.abs(want), 0.0))
  logging.info("%s: max |diff| %.3g, relative %.3g", what, np.nanmax(diff),
               relative)
  np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


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


# Planted inputs of the report's tests (report_*_test.py, stripes_test.py).


SEED_LEVEL = {"scale": 0.27, "entropy": 2.8, "valid_ppl": 240.0}


def seed_row(kappa2, deltas, label="Fig. 6", kappa1=100.0,
             reading="mean_loss", seeds=None) -> dict:
  """A group whose per-seed values are `SEED_LEVEL` + seed offset +
  `deltas`."""
  deltas = {q: np.broadcast_to(deltas.get(q, 0.0), (len(seeds or [0]),))
            for q in SEED_LEVEL}
  seeds = list(seeds or [0])
  row = dict(figure=label.split()[1], label=label, reading=reading,
             kappa1=kappa1, kappa2=kappa2, target=1.0, seeds=seeds,
             n_seeds=len(seeds), final_step=50_000)
  for q, level in SEED_LEVEL.items():
    vals = [level * (1 + 0.01 * s) + d for s, d in zip(seeds, deltas[q])]
    row[f"{q}_values"] = vals
    row[f"{q}_mean"] = float(np.mean(vals))
    row[f"{q}_std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else np.nan
  return row


def summary_row(kappa2, scale, entropy, ppl, n_seeds=3, spread=0.01,
                kappa1=100.0) -> dict:
  """A Fig. 6 summary row (`report_runs.summarize_runs`' form) of the given
  means and one std `spread` (NaN for one seed)."""
  row = dict(figure="6", label="Fig. 6", reading="mean_loss",
             kappa1=kappa1, kappa2=kappa2, n_seeds=n_seeds)
  for name, mean in (("scale", scale), ("entropy", entropy),
                     ("valid_ppl", ppl)):
    row[f"{name}_mean"] = mean
    row[f"{name}_std"] = spread if n_seeds > 1 else math.nan
  return row


def loaded_run(run_dir, seeds, last_step, kappa2=(0.0, 1.0),
               label="Fig. 6") -> dict:
  """A loaded run (`report_runs.load_runs`' form) with synthetic finals."""
  members = [dict(seed=seed, kappa1=100.0, kappa2=k, target=1.0,
                  last_step=last_step,
                  metrics={"mean/entropy": (np.asarray([last_step]),
                                            np.asarray([seed + k]))})
             for seed in seeds for k in kappa2]
  return dict(run_dir=run_dir, figure=label.split()[1], smoke=False,
              label=label, reading="mean_loss", command="", members=members,
              final_step=last_step, num_steps=50_000)


def gap_member(kappa1, kappa2, ppl, entropy=2.8, steps=(0, 10, 20)) -> dict:
  """A member whose valid ppl over `steps` is `ppl`, its entropy flat."""
  return dict(kappa1=kappa1, kappa2=kappa2, target=1.0, seed=0,
              metrics={"valid/ppl": (list(steps), list(ppl)),
                       "mean/entropy": (list(steps), [entropy] * len(steps))})


# Fig. 7's rho maps: RHO_S logged steps x RHO_T key positions.
RHO_S, RHO_T = 40, 32
RHO_X = np.arange(RHO_T) / (RHO_T - 1)           # positions in [0, 1]


def rho_map(profile, noise=0.1, seed=1) -> np.ndarray:
  """rho_SxT: `profile` (over positions, or [S, T]) + noise, clipped."""
  rng = np.random.default_rng(seed)
  return np.clip(profile + noise * rng.standard_normal((RHO_S, RHO_T)), 0, 1)


def striped_profile() -> np.ndarray:
  """A couple of light and dark stripes on a uniform 0.4."""
  i = np.arange(RHO_T)
  return np.where(np.isin(i, (5, 11)), 0.8, np.where(i == 20, 0.1, 0.4))


def assert_trees_equal(a, b) -> None:
  """Asserts that every leaf of `a` equals `b`'s, bit for bit."""
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(
      np.asarray(x), np.asarray(y)), a, b)


def single_theory(**kw):
  """theory_task smoke without the sweep (one run)."""
  from configs import theory_task  # pylint: disable=g-import-not-at-top
  c = theory_task.get_config("smoke")
  c.sweep.kappa1, c.sweep.kappa2, c.sweep.target = (), (), ()
  c.locater.kappa1, c.locater.kappa2 = 1.0, 1.0
  c.update(kw)
  return c


def lm_smoke(kappa2=(0.0, 1.0)):
  """The LM smoke config, a sweep over `kappa2` at kappa1 = 1."""
  c = defaults.smoke(defaults.lm_config())
  c.sweep.kappa2 = kappa2
  c.locater.kappa1 = 1.0
  return c


def sorting_config(num_steps):
  """Dong's sorting task (T = V = 4) for a 2-layer skip SAN + MLP, trained
  `num_steps` steps and logged, evaluated and saved once at the end."""
  c = defaults.synthetic_config("sorting")
  c.model.update(num_layers=2, num_heads=2, d_model=16, ffn_dim=32, mlp=True)
  c.data.update(seq_len=4, vocab_size=4, batch_size=32, eval_sequences=256)
  c.opt.lr = 3e-3
  c.num_steps = num_steps
  c.log_every = c.eval_every = c.checkpoint_every = num_steps
  return c


def plain_loss(task, params, batch):
  """(loss sum, weight) from the whole [B, T, V] logits."""
  from qkspec.training import tasks  # pylint: disable=g-import-not-at-top
  logits = task.model.apply({"params": params}, batch["inputs"],
                            deterministic=True)
  return tasks.token_loss(logits, batch)


# tests/testdata/wikitext2_tiny/ is hand-written in the official format; its
# counts and ids below were worked out by hand.
WIKITEXT2_TINY = ROOT / "tests" / "testdata" / "wikitext2_tiny"
# Train vocabulary in order of first appearance (by hand).
WIKITEXT2_TINY_VOCAB = (
    "<eos> = Alpha Beta The cat sat on the mat . dog <unk> History A "
    "and a Gamma of is 1 @,@ 000").split()
# valid: " \n", " = Beta = \n", " \n", " The cat and the dog sat . \n",
# " A mat is on the cat . \n", " \n".
WIKITEXT2_TINY_VALID_IDS = [0, 1, 3, 1, 0, 0, 4, 5, 15, 8, 11, 6, 10, 0,
                            14, 9, 19, 7, 8, 5, 10, 0, 0]
# test: "zebra" and "mats" are not in train and become <unk> (12).
WIKITEXT2_TINY_TEST_IDS = [0, 1, 2, 1, 0, 0, 4, 12, 6, 7, 20, 21, 22, 12, 10,
                           0, 0]


def wikitext2_data_config(data_dir, manual_dir):
  """`lm_config().data` building WikiText-2 from `manual_dir` into
  `data_dir`."""
  c = defaults.lm_config().data
  c.data_dir, c.manual_dir = str(data_dir), str(manual_dir)
  return c


class BuiltWikitext2Tiny:
  """Mixin for a TestCase class: `setUpClass` builds wikitext2_tiny into a
  temporary data_dir (`cls._tmp`) and reads its splits (`cls.data`)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    from qkspec.data import pipeline  # pylint: disable=g-import-not-at-top
    cls._tmp = tempfile.mkdtemp()
    cls.data = pipeline.load_splits(
        wikitext2_data_config(cls._tmp, WIKITEXT2_TINY),
        verify_checksums=False)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls._tmp, ignore_errors=True)
    super().tearDownClass()
