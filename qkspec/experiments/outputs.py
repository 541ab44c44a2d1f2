"""Helpers shared by the experiments: workdir, config, tables, PNGs, checks.

Every experiment writes into one flat workdir:

* `config.json`: the resolved config (after `--config.x=y` overrides);
* `<table>.csv` and `<table>.json`: one row per dict, same columns;
* `<figure>.png`: matplotlib figures drawn with the Agg backend.

Config checks (`require`, `require_ints`, ...) raise ValueError naming the
field (`require_temperature`: None, the default of
`qkspec.theory.softmax.temperature`, or > 0). Nothing here knows about the
maths; the experiments pass plain Python rows.
"""
import contextlib
import csv
import json
import math
import pathlib
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from absl import logging
import ml_collections
import numpy as np


def start_run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path,
              validate: Callable[[ml_collections.ConfigDict], None]
              ) -> tuple[ml_collections.ConfigDict, pathlib.Path,
                         list[pathlib.Path]]:
  """The first steps of every experiment's `run`.

  Validates the config (before anything is written), creates the workdir
  and writes `config.json`.

  Returns:
    (the config, the workdir as a Path, [the config.json path]).
  """
  validate(config)
  workdir = make_workdir(workdir)
  return config, workdir, [write_config(config, workdir)]


def make_workdir(workdir: str | pathlib.Path) -> pathlib.Path:
  """Creates `workdir` (and parents) if needed and returns it as a Path."""
  if not str(workdir):
    raise ValueError("workdir must be a non-empty path.")
  path = pathlib.Path(workdir).expanduser()
  path.mkdir(parents=True, exist_ok=True)
  return path


def _jsonable(value: Any) -> Any:
  """Converts numpy/jax scalars and arrays, tuples and NaN/inf for JSON."""
  if isinstance(value, dict):
    return {str(k): _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if hasattr(value, "tolist") and not isinstance(value, str):
    return _jsonable(np.asarray(value).tolist())
  if isinstance(value, float) and not math.isfinite(value):
    return str(value)        # "inf", "nan": strict JSON has no such numbers
  return value


def write_json(obj: Any, workdir: pathlib.Path, name: str) -> pathlib.Path:
  path = pathlib.Path(workdir) / f"{name}.json"
  path.write_text(json.dumps(_jsonable(obj), indent=1) + "\n")
  return path


def write_config(config: ml_collections.ConfigDict,
                 workdir: pathlib.Path) -> pathlib.Path:
  """Writes the resolved config to `workdir/config.json`."""
  return write_json(config.to_dict(), workdir, "config")


def write_table(rows: Sequence[dict[str, Any]], workdir: pathlib.Path,
                name: str) -> list[pathlib.Path]:
  """Writes `rows` (dicts with the same keys) to `name.csv` and `name.json`."""
  if not rows:
    raise ValueError(f"table {name!r} has no rows.")
  columns = list(rows[0])
  rows = [_jsonable(row) for row in rows]
  csv_path = pathlib.Path(workdir) / f"{name}.csv"
  with csv_path.open("w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=columns)
    writer.writeheader()
    writer.writerows(rows)
  return [csv_path, write_json(rows, workdir, name)]


def read_csv(path: str | pathlib.Path) -> list[dict[str, str]]:
  """Reads a table written by `write_table` (values come back as strings)."""
  with pathlib.Path(path).open(newline="") as f:
    return list(csv.DictReader(f))


def pyplot():
  """matplotlib.pyplot on the non-interactive Agg backend."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def save_figure(fig, workdir: pathlib.Path, name: str,
                dpi: int = 120) -> pathlib.Path:
  """Saves `fig` as `workdir/name.png` and closes it."""
  path = pathlib.Path(workdir) / f"{name}.png"
  fig.savefig(path, dpi=dpi, bbox_inches="tight")
  pyplot().close(fig)
  return path


def format_table(rows: Sequence[dict[str, Any]],
                 columns: Iterable[str] | None = None) -> str:
  """A fixed-width text rendering of `rows` for the log."""
  columns = list(columns or rows[0])

  def fmt(v):
    if isinstance(v, float):
      return f"{v:.3g}"
    return str(v)

  cells = [[fmt(row[c]) for c in columns] for row in rows]
  widths = [max(len(c), *(len(r[k]) for r in cells))
            for k, c in enumerate(columns)]
  lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
  lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
  return "\n".join(lines)


def log_outputs(name: str, paths: Sequence[pathlib.Path]) -> None:
  """Logs and prints where an experiment's files went."""
  logging.info("%s: wrote %d files into %s", name, len(paths),
               pathlib.Path(paths[0]).parent if paths else "-")
  lines = [f"{name}: figures and tables written to"]
  lines += [f"  {p}" for p in sorted(paths)]
  print("\n".join(lines), flush=True)


def require(ok: bool, field: str, what: str, value: Any) -> None:
  """Raises ValueError naming the config field unless `ok` (config checks)."""
  if not ok:
    raise ValueError(f"config.{field} {what}, got {value!r}.")


def require_ints(config: ml_collections.ConfigDict,
                 minimums: Mapping[str, int]) -> None:
  """Raises ValueError unless each `config[field]` is an int >= its minimum."""
  for field, low in minimums.items():
    value = config[field]
    require(isinstance(value, int) and not isinstance(value, bool)
            and value >= low, field, f"must be an integer >= {low}", value)


def require_experiment(config: ml_collections.ConfigDict, name: str) -> None:
  """Raises ValueError if `config.experiment` is set and is not `name`."""
  value = config.get("experiment", name)
  require(value == name, "experiment", f"must be {name!r} to run "
          f"qkspec.experiments.{name}", value)


def require_temperature(config: ml_collections.ConfigDict) -> None:
  """Raises ValueError unless `config.temperature` is None or > 0."""
  value = config.temperature
  require(value is None or (isinstance(value, (int, float))
                            and not isinstance(value, bool) and value > 0),
          "temperature", "must be None (the default sqrt(head width)) or > 0",
          value)


@contextlib.contextmanager
def heartbeat(what: str, every_s: float = 30.0):
  """Logs "<what>: still running, N s elapsed" every `every_s` s in the block,
  and "<what>: done in N s" after it.

  For work that is one compiled computation (no progress of its own), so a
  long run is never silent.
  """
  stop = threading.Event()
  start = time.perf_counter()

  def beat():
    while not stop.wait(every_s):
      logging.info("%s: still running, %.0f s elapsed", what,
                   time.perf_counter() - start)

  thread = threading.Thread(target=beat, daemon=True)
  thread.start()
  try:
    yield
  finally:
    stop.set()
    thread.join()
  logging.info("%s: done in %.1f s", what, time.perf_counter() - start)
