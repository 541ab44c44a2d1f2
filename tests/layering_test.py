"""The package's layers, checked: what each layer may import.

qkspec/theory (the maths) imports only jax and numpy; qkspec/config only
ml_collections; qkspec/kernels only jax (and the maths' checks);
qkspec/records neither jax nor matplotlib; qkspec/for_flax only the maths;
and no layer imports one below it in theory -> config -> runtime -> data
-> kernels -> training -> for_flax -> records -> plots -> {experiments,
report} -> cli,
where experiments and report are siblings that never import each other.
Inside the report, each module belongs to one phase, read -> judge ->
render -> write, and imports none of a later phase.
"""
import ast
import json
import pathlib
import subprocess
import sys

from absl.testing import absltest
from absl.testing import parameterized

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "qkspec"
BELOW = ("theory", "config", "runtime", "data", "kernels", "training",
         "for_flax", "records", "plots")
# Each layer and the layers it may import.
ALLOWED = {**{layer: BELOW[:i + 1] for i, layer in enumerate(BELOW)},
           # a contract with users' models: on the maths alone
           "for_flax": ("theory", "for_flax"),
           "experiments": BELOW + ("experiments",),
           "report": BELOW + ("report",),
           "cli": tuple(BELOW) + ("experiments", "report", "cli")}
LAYERS = tuple(ALLOWED)
# The report's phases in order, and their modules (qkspec/report/*.py).
REPORT_PHASES = (
    ("read", ("run_cells", "commands")),
    ("judge", ("stats", "floors", "verdicts", "pooled", "stripes",
               "locater_minimum", "backlog", "evidence")),
    ("render", ("answer", "rules", "figures", "sections")),
    ("write", ("writer",)))
HEAVY = ("flax", "optax", "orbax", "grain", "tensorflow_datasets",
         "tensorflow", "ml_collections", "matplotlib", "clu", "torch")


def _loaded_after(code: str) -> list[str]:
  """Top-level packages in sys.modules after `code`, in a fresh interpreter."""
  probe = (f"import sys\n{code}\nimport json\n"
           "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
  out = subprocess.run([sys.executable, "-c", probe], check=True,
                       capture_output=True, text=True, cwd=ROOT).stdout
  return json.loads(out.strip().splitlines()[-1])


def _qkspec_imports(path: pathlib.Path) -> set[str]:
  """Every qkspec module a file imports, at top level or inside functions."""
  tree = ast.parse(path.read_text())
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names if a.name.startswith("qkspec"))
    elif isinstance(node, ast.ImportFrom) and node.module and (
        node.module.startswith("qkspec")):
      out.update(f"{node.module}.{a.name}" for a in node.names)
  return out


def _layer(module: str) -> str | None:
  parts = module.split(".")
  return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


class LayeringTest(parameterized.TestCase):

  def test_theory_imports_no_framework(self):
    modules = sorted(p.stem for p in (PACKAGE / "theory").glob("*.py"))
    self.assertContainsSubset(
        {"softmax", "randomwalk", "spectrum", "propagation", "locater",
         "diagnostics", "entropy_bounds", "san", "san_paths",
         "grid_estimator"}, modules)
    code = "\n".join(f"import qkspec.theory.{m}" for m in modules)
    code += ("\nfrom qkspec import softmax, randomwalk, spectrum, "
             "propagation, locater, diagnostics")
    loaded = _loaded_after(code)
    self.assertIn("jax", loaded)        # the probe itself is not vacuous
    self.assertEmpty([m for m in HEAVY if m in loaded],
                     msg="the theory layer must import only jax and numpy")

  def test_kernels_import_only_jax(self):
    loaded = _loaded_after("from qkspec import kernels\n"
                           "from qkspec.kernels import flash_xent")
    self.assertIn("jax", loaded)
    self.assertEmpty([m for m in HEAVY if m in loaded],
                     msg="qkspec.kernels must import only jax and numpy")

  def test_probe_sees_heavy_imports(self):
    # The check above can fail: importing the model does load flax.
    self.assertIn("flax", _loaded_after("import qkspec.training.model"))

  def test_configs_import_only_config_helpers(self):
    files = sorted((ROOT / "configs").glob("*.py"))
    self.assertGreater(len(files), 5)
    code = ("from qkspec.config import args\n" + "\n".join(
        f"args.load_config_file({str(f)!r})" for f in files
        if f.stem != "__init__"))
    loaded = _loaded_after(code)
    heavy = [m for m in HEAVY if m in loaded and m != "ml_collections"]
    self.assertEmpty(heavy + [m for m in ("jax",) if m in loaded],
                     msg="configs must load without jax, flax or the data "
                     "pipeline")

  def test_records_import_neither_jax_nor_matplotlib(self):
    loaded = _loaded_after("from qkspec.records import rundir, store")
    self.assertIn("numpy", loaded)
    self.assertEmpty([m for m in ("jax", "matplotlib") + HEAVY
                      if m in loaded])

  @parameterized.parameters(*LAYERS)
  def test_no_layer_imports_a_later_one(self, layer):
    allowed = set(ALLOWED[layer])
    bad = []
    files = ([PACKAGE / "cli.py"] if layer == "cli"
             else sorted((PACKAGE / layer).rglob("*.py")))
    self.assertNotEmpty(files)
    for path in files:
      for module in _qkspec_imports(path):
        target = _layer(module)
        if target is not None and target not in allowed:
          bad.append(f"{path.relative_to(ROOT)} imports {module}")
    self.assertEmpty(bad)

  def test_for_flax_imports_no_training(self):
    # for_flax is a contract with users' models: it stands on the maths,
    # never on qkspec's own training stack.
    bad = [f"{path.relative_to(ROOT)} imports {module}"
           for path in sorted((PACKAGE / "for_flax").rglob("*.py"))
           for module in _qkspec_imports(path)
           if _layer(module) == "training"]
    self.assertEmpty(bad)
    probe = ("import sys\nimport qkspec.for_flax\n"
             "print(sorted(m for m in sys.modules if m.startswith('qkspec.')))")
    loaded = subprocess.run([sys.executable, "-c", probe], check=True,
                            capture_output=True, text=True,
                            cwd=ROOT).stdout.strip().splitlines()[-1]
    self.assertIn("qkspec.for_flax.qk", loaded)     # the probe sees modules
    self.assertNotIn("qkspec.training", loaded)

  def test_experiments_and_report_never_import_each_other(self):
    for a, b in (("experiments", "report"), ("report", "experiments")):
      self.assertNotIn(b, ALLOWED[a])
    self.assertIn("report", ALLOWED["cli"])     # the check is not vacuous

  def test_report_phases_import_no_later_phase(self):
    phase = {m: i for i, (_, ms) in enumerate(REPORT_PHASES) for m in ms}
    files = sorted((PACKAGE / "report").glob("*.py"))
    self.assertEqual(sorted(phase), sorted(p.stem for p in files
                                           if p.stem != "__init__"))
    bad = []
    for path in files:
      for module in _qkspec_imports(path):
        parts = module.split(".")
        if path.stem in phase and parts[:2] == ["qkspec", "report"] and (
            phase[parts[2]] > phase[path.stem]):
          bad.append(f"{path.stem} ({REPORT_PHASES[phase[path.stem]][0]}) "
                     f"imports {parts[2]} "
                     f"({REPORT_PHASES[phase[parts[2]]][0]})")
    self.assertEmpty(bad)

  def test_flat_package_holds_only_the_command_line(self):
    flat = sorted(p.name for p in PACKAGE.glob("*.py"))
    self.assertEqual(flat, ["__init__.py", "cli.py"])

  def test_maths_modules_are_the_public_face(self):
    code = """
import sys, warnings
with warnings.catch_warnings(record=True) as caught:
  warnings.simplefilter("always")
  import qkspec
  from qkspec import softmax, propagation, grid_estimator
assert not caught, [str(w.message) for w in caught]
assert "flax" not in sys.modules and "jax" in sys.modules
import qkspec.theory.propagation
assert propagation is qkspec.theory.propagation
assert qkspec.spectrum is sys.modules["qkspec.theory.spectrum"]
try:
  qkspec.model
except AttributeError:
  pass
else:
  raise AssertionError("qkspec.model is no attribute of qkspec")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, cwd=ROOT)
    self.assertEqual(out.returncode, 0, out.stderr)


if __name__ == "__main__":
  absltest.main()
