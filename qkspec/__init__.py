"""qkspec: when self-attention localizes (Bao, Hataya, Karakida, ICML 2024).

The package is grouped by layer, each importing only those before it
(tests/layering_test.py): `theory`, the paper's maths as pure functions of
arrays (jax and numpy only); `config`, the defaults, the `:arg` grammar and
validation (ml_collections only); `data`, WikiText-2 and token batches;
`kernels`, the model's optional fast paths; `training`, the Flax model,
step, loop, sweeps, checkpoints and metrics; `for_flax`, W_QK, LocATER and
the diagnostics on any Flax attention model; `experiments`, one module per
figure family, `run(config, workdir)`.

The maths modules are the public face: `from qkspec import propagation` is
`qkspec.theory.propagation`, loaded on first use, so that `import
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
