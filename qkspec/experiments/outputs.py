"""Small I/O helpers shared by the experiments: workdir, config, tables, PNGs.

Every experiment writes into one flat workdir:

* `config.json`: the resolved config (after `--config.x=y` overrides);
* `<table>.csv` and `<table>.json`: one row per dict, same columns;
* `<figure>.png`: matplotlib figures drawn with the Agg backend.

Nothing here knows about the maths; the experiments pass plain Python rows.
"""
import csv
import json
import math
import pathlib
from typing import Any, Iterable, Sequence

from absl import logging
import ml_collections
import numpy as np

CONFIG_VARIANTS = ("full", "smoke")


def parse_config_arg(arg: str | None) -> bool:
  """Returns True for the `smoke` variant of `--config file.py:smoke`.

  Accepts None or "" (the full run), "full" and "smoke"; anything else raises
  ValueError so a typo does not silently launch the full sweep.
  """
  variant = arg or "full"
  if variant not in CONFIG_VARIANTS:
    raise ValueError(f"config argument must be one of {CONFIG_VARIANTS}, got "
                     f"{arg!r} (use --config path.py:smoke).")
  return variant == "smoke"


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
