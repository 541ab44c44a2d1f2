"""Helpers shared by the experiments: workdir, config checks, tables, PNGs.

An experiment writes into one flat workdir: `config.json` (the resolved
config), `<table>.csv` with `<table>.json` (one row per dict) and
`<figure>.png` (`qkspec.plots.style`). The config checks raise
`ConfigError` naming the field; nothing here knows about the maths.
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

from qkspec.config import ConfigError


def start_run(config: ml_collections.ConfigDict, workdir: str | pathlib.Path,
              validate: Callable[[ml_collections.ConfigDict], None]
              ) -> tuple[pathlib.Path, list[pathlib.Path]]:
  """Validates `config` (then logs it), creates `workdir`, writes
  `config.json`; (the workdir as a Path, [the config.json path])."""
  validate(config)
  logging.info("config:\n%s", config)
  if not str(workdir):
    raise ConfigError("workdir must be a non-empty path.")
  workdir = pathlib.Path(workdir).expanduser()
  workdir.mkdir(parents=True, exist_ok=True)
  return workdir, [_write_json(config.to_dict(), workdir, "config")]


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


def _write_json(obj: Any, workdir: pathlib.Path, name: str) -> pathlib.Path:
  path = pathlib.Path(workdir) / f"{name}.json"
  path.write_text(json.dumps(_jsonable(obj), indent=1) + "\n")
  return path


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
  return [csv_path, _write_json(rows, workdir, name)]


def write_tables(tables: Mapping[str, Sequence[dict[str, Any]]],
                 workdir: pathlib.Path) -> list[pathlib.Path]:
  """`write_table` for each non-empty {name: rows}, in order."""
  return [path for name, rows in tables.items() if rows
          for path in write_table(rows, workdir, name)]


def read_csv(path: str | pathlib.Path) -> list[dict[str, str]]:
  """Reads a table written by `write_table` (values come back as strings)."""
  with pathlib.Path(path).open(newline="") as f:
    return list(csv.DictReader(f))


def format_table(rows: Sequence[dict[str, Any]],
                 columns: Iterable[str] | None = None) -> str:
  """A fixed-width text rendering of `rows` for the log."""
  columns = list(columns or rows[0])
  cells = [[f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c])
            for c in columns] for row in rows]
  widths = [max(len(c), *(len(r[k]) for r in cells))
            for k, c in enumerate(columns)]
  lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
  lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
  return "\n".join(lines)


def show(header: str, text: str) -> None:
  """Logs and prints "`header`\n`text`"."""
  logging.info("%s\n%s", header, text)
  print(f"{header}\n{text}", flush=True)


def log_outputs(name: str, paths: Sequence[pathlib.Path]) -> None:
  """Logs and prints where an experiment's files went."""
  logging.info("%s: wrote %d files into %s", name, len(paths),
               pathlib.Path(paths[0]).parent if paths else "-")
  lines = [f"{name}: figures and tables written to"]
  lines += [f"  {p}" for p in sorted(paths)]
  print("\n".join(lines), flush=True)


def require(ok: bool, field: str, what: str, value: Any) -> None:
  """Raises ConfigError naming the config field unless `ok` (config checks)."""
  if not ok:
    raise ConfigError(f"config.{field} {what}, got {value!r}.")


def require_ints(config: ml_collections.ConfigDict,
                 minimums: Mapping[str, int]) -> None:
  """Raises ConfigError unless each `config[field]` is an int >= its minimum."""
  for field, low in minimums.items():
    value = config[field]
    require(isinstance(value, int) and not isinstance(value, bool)
            and value >= low, field, f"must be an integer >= {low}", value)


def require_positive(config: ml_collections.ConfigDict, *fields: str) -> None:
  """Raises ConfigError unless each `config[field]` ("a.b" for nested) > 0."""
  for field in fields:
    require(config[field] > 0, field, "must be > 0", config[field])


def require_in(config: ml_collections.ConfigDict, field: str,
               choices: Sequence[str]) -> None:
  """Raises ConfigError unless `config[field]` is one of `choices`."""
  require(config[field] in choices, field, f"must be one of {choices}",
          config[field])


def require_subset(config: ml_collections.ConfigDict, field: str,
                   choices: Iterable[str]) -> None:
  """Raises ConfigError unless `config[field]` is a non-empty subset."""
  value, choices = config[field], tuple(choices)
  require(len(value) > 0 and set(value) <= set(choices), field,
          f"must be a non-empty subset of {choices}", value)


def require_temperature(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError unless `config.temperature` is None or > 0."""
  value = config.temperature
  require(value is None or (isinstance(value, (int, float))
                            and not isinstance(value, bool) and value > 0),
          "temperature", "must be None (the default sqrt(head width)) or > 0",
          value)


@contextlib.contextmanager
def heartbeat(what: str, every_s: float = 30.0):
  """Logs "<what>: still running" every `every_s` s, then "<what>: done".

  For one long compiled computation, so that a long run is never silent.
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
