"""The trip from `write_report`'s run directories to the verdicts, traced.

`trip()` runs `writer.write_report` on the committed records and follows
its calls of qkspec's functions -- each call site once, in the order the
program first makes it; not a record's properties, nor the comprehensions
and lambdas inside a function -- until the report starts to render (its
first call into `sections`): by then the runs are read and judged. It
returns the files entered in that order, a file again each time the trip
comes back to it after leaving it.

  python tests/report/report_trip.py     # the report files and re-entries
"""
import importlib
import inspect
import os
import pathlib
import pkgutil
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
_STOP = "qkspec/report/sections.py"       # the render phase begins


class _Rendering(Exception):
  """The report started to render: the trip to the verdicts is over."""


def _where(code) -> str | None:
  """qkspec/<folder>/<file>.py of a code object, None outside qkspec."""
  parts = pathlib.Path(code.co_filename).parts
  if "qkspec" not in parts:
    return None
  return "/".join(parts[len(parts) - 1 - parts[::-1].index("qkspec"):])


def _properties() -> set:
  """The code of every property getter of qkspec.report and .records."""
  out = set()
  for package in ("qkspec.report", "qkspec.records"):
    for info in pkgutil.iter_modules(importlib.import_module(package)
                                     .__path__):
      module = importlib.import_module(f"{package}.{info.name}")
      for _, cls in inspect.getmembers(module, inspect.isclass):
        out |= {p.fget.__code__ for p in vars(cls).values()
                if isinstance(p, property)}
  return out


def _function(frame):
  """The frame of the function a comprehension or lambda runs in."""
  while frame is not None and frame.f_code.co_name.startswith("<"):
    frame = frame.f_back
  return frame


def trip() -> list[str]:
  """The files of qkspec the report passes through, in order, from its
  run directories to the verdicts (consecutive calls in one file: once)."""
  # pylint: disable=g-import-not-at-top
  from qkspec.records import store
  from qkspec.report import writer
  skip, seen, rooms = _properties(), set(), []

  def profile(frame, event, _):
    code = frame.f_code
    if event != "call" or code.co_name.startswith("<") or code in skip:
      return
    if _where(code) == _STOP:
      raise _Rendering
    caller = _function(frame.f_back)
    site = caller and (caller.f_code, caller.f_lineno, code)
    if caller and _where(caller.f_code) and _where(code) and (
        site not in seen):
      seen.add(site)
      if rooms[-1] != _where(code):
        rooms.append(_where(code))
  records = ROOT / "reproduction" / "records"
  out = pathlib.Path(tempfile.mkdtemp()) / "REPRODUCTION.md"
  rooms.append("qkspec/report/writer.py")
  sys.setprofile(profile)
  try:
    writer.write_report(store.listed(records), out,
                        replicate_dirs=store.listed(records, "replicate"))
  except _Rendering:
    pass
  finally:
    sys.setprofile(None)
  return rooms


def counts(rooms) -> tuple[int, int]:
  """(report files entered, re-entries: entering a file left before)."""
  report = {r for r in rooms if r.startswith("qkspec/report/")}
  again = sum(r in rooms[:i] for i, r in enumerate(rooms))
  return len(report), again


if __name__ == "__main__":
  sys.path.insert(0, str(ROOT))
  os.environ.setdefault("JAX_PLATFORMS", "cpu")
  found = trip()
  files, again = counts(found)
  print(f"report files: {files}; re-entries: {again}; files: "
        f"{len(set(found))}")
  print(" > ".join(r.removeprefix("qkspec/") for r in found))
