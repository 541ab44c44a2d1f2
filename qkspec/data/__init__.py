"""Data: WikiText-2 as a tfds builder (`wikitext2/`) and token batches.

`pipeline`: array_record files read with `tfds.data_source`, fairseq-style
token blocks, batches that are pure functions of (seed, step), and a grain
loader. The attributes of `pipeline` are also reachable here
(`qkspec.data.load_splits`), as before the layered layout.
"""
import importlib

_SUBMODULES = ("pipeline", "wikitext2")


def __getattr__(name):
  if name.startswith("__"):
    raise AttributeError(name)
  if name in _SUBMODULES:
    return importlib.import_module(f"qkspec.data.{name}")
  return getattr(importlib.import_module("qkspec.data.pipeline"), name)
