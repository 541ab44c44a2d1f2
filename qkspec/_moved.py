"""Old module paths of qkspec, kept working after the layered layout.

qkspec grouped its flat modules by layer (theory/, config/, data/,
training/, experiments/). An import finder maps each old path to where the
code lives now, so `import qkspec.model`, `from qkspec import train` and
`from qkspec.experiments import io` still work. A moved module (one that
was renamed or left the maths' public face) warns once with
DeprecationWarning naming its new path; the maths modules
(`qkspec.propagation` = `qkspec.theory.propagation`) are the public face
and do not warn. An old path that now spans several modules (`qkspec.train`)
is a stand-in whose attributes come from each of them in turn.
"""
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

# Old path -> (new module paths, warn?).
_THEORY = ("softmax", "randomwalk", "spectrum", "propagation", "locater",
           "diagnostics", "entropy_bounds", "san")
MOVED: dict[str, tuple[tuple[str, ...], bool]] = {
    **{f"qkspec.{m}": ((f"qkspec.theory.{m}",), False) for m in _THEORY},
    "qkspec._checks": (("qkspec.theory._checks",), True),
    "qkspec.paths": (("qkspec.theory.san_paths",), True),
    "qkspec.sweep_fast": (("qkspec.theory.grid_estimator",), True),
    "qkspec.model": (("qkspec.training.model",), True),
    "qkspec.fused_xent": (("qkspec.training.fused_xent",), True),
    "qkspec.tasks": (("qkspec.training.tasks",), True),
    "qkspec.sweep": (("qkspec.training.sweep",), True),
    "qkspec.checkpoint": (("qkspec.training.checkpoint",), True),
    "qkspec.metric_writer": (("qkspec.training.metric_writer",), True),
    "qkspec.train": (("qkspec.training.loop", "qkspec.training.step"), True),
    "qkspec.train_metrics": (("qkspec.training.layer_stats",), True),
    "qkspec.config_lib": (("qkspec.config.defaults",), True),
    "qkspec.config_checks": (("qkspec.config.schema",), True),
    "qkspec.wikitext2": (("qkspec.data.wikitext2",), True),
    "qkspec.plot_training": (("qkspec.experiments.training_plots",), True),
    "qkspec.demo": (("qkspec.experiments.demo",), True),
    "qkspec.experiments.io": (("qkspec.experiments.outputs",), True),
    "qkspec.experiments.theory": (("qkspec.experiments.theory_rho",), True),
    "qkspec.experiments.simulation": (("qkspec.experiments.simulate_rho",),
                                      True),
    "qkspec.experiments.simulation_grid": (
        ("qkspec.experiments.simulate_grid",), True),
    "qkspec.experiments.collapse": (("qkspec.experiments.rank_collapse",),
                                    True),
}


class MultiModule(types.ModuleType):
  """An old module whose attributes now come from several new modules."""

  def __init__(self, old: str, new: tuple[str, ...]):
    super().__init__(old, f"{old} is now {' and '.join(new)}.")
    self._moved_to = new

  def __getattr__(self, name: str):
    if name.startswith("__"):
      raise AttributeError(name)
    for target in self._moved_to:
      module = importlib.import_module(target)
      if hasattr(module, name):
        return getattr(module, name)
    raise AttributeError(f"module {self.__name__!r} (now "
                         f"{', '.join(self._moved_to)}) has no attribute "
                         f"{name!r}.")

  def __dir__(self):
    return sorted({n for t in self._moved_to
                   for n in dir(importlib.import_module(t))})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  """Finds the old paths of MOVED; loading returns the new module.

  The import system stamps the old path's spec on the module it loads;
  `exec_module` puts the new module's own spec back.
  """

  def __init__(self):
    self._specs = {}

  def find_spec(self, fullname, path=None, target=None):
    del path, target
    if fullname not in MOVED:
      return None
    return importlib.machinery.ModuleSpec(fullname, self)

  def create_module(self, spec):
    new, warn = MOVED[spec.name]
    if warn:
      warnings.warn(f"{spec.name} has moved to {' and '.join(new)}; import "
                    "it from there.", DeprecationWarning, stacklevel=3)
    if len(new) > 1:
      return MultiModule(spec.name, new)
    module = importlib.import_module(new[0])
    self._specs[spec.name] = module.__spec__
    return module

  def exec_module(self, module):
    # Already executed under its new name; undo the old spec's stamp.
    own = self._specs.pop(getattr(module.__spec__, "name", None), None)
    if own is not None:
      module.__spec__ = own


def install() -> None:
  if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())
