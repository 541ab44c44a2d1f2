"""Helpers shared by the tests (not a test file)."""
import pathlib

from qkspec import config_lib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def get_config(name, arg=None):
  """`configs/<name>.py`'s get_config(arg), as `--config configs/<name>.py:arg`."""
  return config_lib.load_config_file(ROOT / "configs" / f"{name}.py", arg)
