"""qkspec: when self-attention localizes (Bao, Hataya, Karakida, ICML 2024).

The package is grouped by layer; each layer imports only the ones above it
in this list (tests/layering_test.py checks it):

* `qkspec.theory`: the paper's maths as pure functions of arrays (jax and
  numpy only): softmax, randomwalk, spectrum, propagation, locater,
  diagnostics, entropy_bounds, san, san_paths, grid_estimator;
* `qkspec.config`: config defaults, the `:arg` grammar and validation
  (ml_collections only);
* `qkspec.data`: WikiText-2 (tfds builder) and token batches;
* `qkspec.training`: the Flax model, losses, train step, loop, sweeps,
  checkpoints and metrics (flax lives here and in `for_flax`, optax and
  orbax only here);
* `qkspec.for_flax`: W_QK, LocATER and the diagnostics on any Flax
  attention model (linen or nnx);
* `qkspec.experiments`: one module per figure family, `run(config, workdir)`,
  the demo, the training plots and the command-line runner.

The maths modules are the public face: `from qkspec import propagation` is
`qkspec.theory.propagation`. They load on first use, so `import
qkspec.config` (what a config file does) does not import jax.
"""
import importlib

__version__ = "0.1.0"

_THEORY = ("softmax", "randomwalk", "spectrum", "propagation", "locater",
           "diagnostics", "entropy_bounds", "san", "san_paths",
           "grid_estimator")


def __getattr__(name):
  if name in _THEORY:       # qkspec.spectrum after a plain `import qkspec`
    return importlib.import_module(f"qkspec.theory.{name}")
  raise AttributeError(f"module 'qkspec' has no attribute {name!r}")
