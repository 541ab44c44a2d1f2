"""Helpers shared by the tests (not a test file)."""
import json
import os
import pathlib
import shutil
import tempfile
import unittest

import jax
import numpy as np

from qkspec.config import defaults

ROOT = pathlib.Path(__file__).resolve().parents[1]
SLOW = os.environ.get("QKSPEC_SLOW") == "1"
# The persistent compilation cache the tests and their child processes share.
CACHE_DIR = os.path.join(tempfile.gettempdir(), "qkspec_test_jax_cache")


def configure_jax() -> None:
  """The JAX settings every test runs under, made once: by conftest.py for
  pytest, and by the child processes that tests start. Rank promotion
  raises (a silent broadcast is a bug); every compilation is cached on
  disk, so that the two pytest workers and later tests reuse even the
  small ones."""
  jax.config.update("jax_numpy_rank_promotion", "raise")
  jax.config.update("jax_compilation_cache_dir", CACHE_DIR)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


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


def metric_records(directory, drop=("steps_per_sec",)) -> list[dict]:
  """The records of `directory`/metrics.jsonl without the keys in `drop`
  (timings, which differ between equal runs)."""
  with open(pathlib.Path(directory) / "metrics.jsonl") as f:
    return [{k: v for k, v in json.loads(line).items() if k not in drop}
            for line in f]


def assert_trees_equal(a, b) -> None:
  """Asserts that every leaf of `a` equals `b`'s, bit for bit."""
  jax.tree.map(lambda x, y: np.testing.assert_array_equal(
      np.asarray(x), np.asarray(y)), a, b)


