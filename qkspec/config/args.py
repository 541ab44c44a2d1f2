"""The `--config file.py:ARG` grammar and loading a config file.

`arguments(path)` reads which arguments a config file takes, for --help.
"""
import importlib.util
import pathlib
from typing import Any

import ml_collections

from qkspec.config.errors import ConfigError


class _Declared(Exception):
  """What `parse_arg` raises when `arguments` asks: the `defaults`."""

  def __init__(self, defaults: dict[str, Any]):
    super().__init__()
    self.defaults = defaults


_ASK = object()   # the `arg` with which `arguments` calls get_config


def parse_arg(arg: str | None, **defaults) -> ml_collections.ConfigDict:
  """"smoke,L=3,d=32" -> ConfigDict(smoke=True, L=3, d=32) over `defaults`:
  a bare name sets a bool to True, `k=v` takes the default's type; a tuple
  default takes every value up to the next name, "kappa2=10,100,1000" ->
  (10.0, 100.0, 1000.0) (of its entries' type, float if it has none);
  unknown names and values not of that type raise ConfigError."""
  if arg is _ASK:
    raise _Declared(defaults)
  out = ml_collections.ConfigDict(defaults)
  listing = None             # the tuple argument still taking values
  for part in (arg or "").split(","):
    part = part.strip()
    if not part:
      continue
    key, sep, value = part.partition("=")
    if not sep and key not in defaults and listing is not None:
      out[listing] += (_entry(listing, defaults[listing], key),)
      continue
    listing = None
    if key not in defaults:
      raise ConfigError(f"unknown config argument {key!r}; known: "
                        f"{sorted(defaults)}.")
    default = defaults[key]
    if not sep:
      if not isinstance(default, bool):
        raise ConfigError(f"config argument {key!r} needs a value "
                          f"({key}=...).")
      out[key] = True
    elif isinstance(default, bool):
      out[key] = value.lower() in ("1", "true", "yes")
    elif isinstance(default, tuple):
      out[key] = (_entry(key, default, value),)
      listing = key
    else:
      try:
        out[key] = type(default)(value)
      except ValueError:
        raise ConfigError(f"config argument {key!r} takes values like "
                          f"{default!r}, got {value!r}.") from None
  return out


def _entry(key: str, default: tuple, text: str):
  """`text` as an entry of tuple argument `key` (the type of `default`'s)."""
  kind = type(default[0]) if default else float
  try:
    return kind(text)
  except ValueError:
    raise ConfigError(f"config argument {key!r} takes {kind.__name__} "
                      f"values, got {text!r} (an unknown argument?).") from None


def load_config_file(path: str | pathlib.Path,
                     arg: str | None = None) -> ml_collections.ConfigDict:
  """`get_config(arg)` of a config file, as `--config path:arg` loads it."""
  path = pathlib.Path(path)
  if not path.is_file():
    raise ConfigError(f"no config file at {path}.")
  spec = importlib.util.spec_from_file_location(f"_config_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(arg)


def arguments(path: str | pathlib.Path) -> dict[str, Any]:
  """The arguments a config file's `get_config` takes (`parse_arg`'s
  defaults), {} if it takes none."""
  try:
    load_config_file(path, _ASK)
  except _Declared as declared:
    return dict(declared.defaults)
  return {}
