"""Imports every module of qkspec (CI runs it on the oldest versions that
setup.py allows) and prints the versions it ran on."""
import importlib
from importlib import metadata
import pkgutil

import qkspec

names = [m.name for m in pkgutil.walk_packages(qkspec.__path__, "qkspec.")]
for name in names:
  importlib.import_module(name)
versions = ", ".join(f"{p} {metadata.version(p)}" for p in (
    "jax", "flax", "optax", "orbax-checkpoint", "numpy"))
print(f"qkspec: {len(names)} modules import on {versions}")
