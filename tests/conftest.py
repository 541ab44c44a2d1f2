"""Set-up shared by every test module and the processes the tests start.

The CPU programs the tests compile are built with LLVM's optimisation off
(`--xla_backend_optimization_level=0`). On a fresh machine (no compilation
cache) compiling is most of the suite's time, and the tests run tiny
programs, so the slower code costs little. XLA's HLO passes, which fix
what is computed and in what order, run as before, and a test that
compares two programs compiles both with the same flags. Set here, before
JAX starts, in the environment that the tests' subprocesses inherit.
Then the JAX settings every test shares (`testutil.configure_jax`), once
for the whole session, so that no test module sets global state.
"""
import os

import pytest

_FLAG = "--xla_backend_optimization_level=0"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = " ".join(
      x for x in (os.environ.get("XLA_FLAGS"), _FLAG) if x)

import testutil  # noqa: E402  (after XLA_FLAGS: JAX reads them at start)

testutil.configure_jax()


def pytest_terminal_summary(terminalreporter, config):
  """Prints the test order's seed (pytest-randomly) even under -q."""
  seed = getattr(config.option, "randomly_seed", None)
  if isinstance(seed, int):
    terminalreporter.write_line(
        f"test order: pytest-randomly seed {seed} (repeat it with "
        f"--randomly-seed={seed})")


# The longest quick tests, started first: pytest-xdist hands the workers the
# tests in collection order, so one of these drawn last by the random order
# would leave the other worker idle at the end.
_LONGEST = ("multidevice_test.py::RunInOwnProcess",
            "readme_test.py::ReadmeTest",
            "sweep_test.py::VmappedSweepTest",
            "reliability_test.py::InterruptTest",
            "precision_test.py::", "writer_test.py::WriteReportTest",
            "tour_test.py::RunsHeadlessTest",
            "store_test.py::RunRecordsTest")


@pytest.hookimpl(trylast=True)     # after pytest-randomly's shuffle
def pytest_collection_modifyitems(items):
  """Moves the `_LONGEST` tests to the front, in their (random) order."""
  items.sort(key=lambda item: not any(s in item.nodeid for s in _LONGEST))
