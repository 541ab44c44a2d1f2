"""Helpers shared by the tests (not a test file)."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def get_config(name, arg=None):
  """`configs/<name>.py`'s get_config(arg), loaded by path as absl does for
  `--config configs/<name>.py:arg` (configs/ is not an installed package)."""
  spec = importlib.util.spec_from_file_location(
      f"_config_{name}", ROOT / "configs" / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)
