"""Run records: what the report reads of a training run, small enough to keep.

Of a `launch/train.py` workdir the report reads only `config.json`,
`members.json`, `run_info.jsonl` and a few metrics
(`run_cells.record_keys`); `write` copies just that into
`records_dir/<role>s/<run directory's basename>/` with `record.json` (the
run directory and its command). Array metrics (Fig. 7's `l0/rho` maps) go
into each member's `maps.npz` as float16, thinned to `MAX_STEPS` steps
(`compact`); the report reads a run's maps compacted too, so a record
reports as its run. Records rebuilt when a run was lost say so ("source")
and may hold final values only, stripe results or a replicate's "spread".
A record whose command sets fields today's config no longer has also
keeps the "commit" that first reported its run, whose code takes them.
"""
import json
import os
import pathlib
import shutil

import numpy as np

RECORD = "record.json"
ROLES = ("run", "replicate")
_COPIED = ("config.json", "members.json", "run_info.jsonl")
_METRICS = "metrics.jsonl"
MAPS = "maps.npz"
MAX_STEPS = 100


def read(path) -> dict:
  """`record.json` of a record ({} for a run directory)."""
  f = pathlib.Path(path) / RECORD
  return json.loads(f.read_text()) if f.is_file() else {}


def origin(path) -> str:
  """The run directory a record came from (`path` itself for a run dir)."""
  return read(path).get("run_dir", str(path))


def name_of(run_dir) -> str:
  """The record's name: the run directory's basename."""
  name = os.path.basename(os.path.normpath(str(run_dir)))
  if name in ("", ".", ".."):
    raise ValueError(f"cannot name a record after {run_dir!r}: give the run "
                     "directory by a path that ends in its own name.")
  return name


def compact(steps, values_SxT) -> tuple[np.ndarray, np.ndarray]:
  """A map as a record keeps it: every ceil(S / MAX_STEPS)-th step back
  from the last, values rounded to float16 (as float64)."""
  stride = -(-len(steps) // MAX_STEPS)
  kept = np.arange(len(steps) - 1, -1, -stride)[::-1]
  values = np.asarray(values_SxT)[kept].astype(np.float16)
  return np.asarray(steps)[kept], values.astype(np.float64)


def read_maps(member_dir) -> dict:
  """{name: (steps, values_SxT float64)} of a member's `maps.npz`."""
  path = pathlib.Path(member_dir) / MAPS
  if not path.is_file():
    return {}
  with np.load(path) as z:
    return {k[:-len("@steps")]: (z[k], z[k[:-len("steps")] + "values"]
                                 .astype(np.float64))
            for k in z.files if k.endswith("@steps")}


def _filter_metrics(src: pathlib.Path, dest: pathlib.Path, keys) -> None:
  """`src`'s metrics reduced to `keys` in `dest`: scalars in metrics.jsonl,
  arrays (and a record's maps) in `MAPS`, compacted."""
  recs = [json.loads(x) for x in
          (src / _METRICS).read_text(encoding="utf-8").splitlines()
          if x.strip()]
  lines, arrays = [], {}
  for r in recs:
    kept = {}
    for k, v in r.items():
      if k in keys and isinstance(v, list):
        arrays.setdefault(k, {})[r["step"]] = v     # a later line wins
      elif k in keys:
        kept[k] = v
    if kept:
      lines.append(json.dumps({"step": r["step"], **kept}) + "\n")
  (dest / _METRICS).write_text("".join(lines), encoding="utf-8")
  maps = {k: v for k, v in read_maps(src).items() if k in keys}
  for k, by_step in arrays.items():
    steps = sorted(by_step)
    maps[k] = (steps, [by_step[s] for s in steps])
  if not maps:
    return
  saved = {}
  for name, (steps, values) in maps.items():
    steps, values = compact(steps, values)
    saved[f"{name}@steps"] = steps.astype(np.int64)
    saved[f"{name}@values"] = values.astype(np.float16)
  with open(dest / MAPS, "wb") as f:
    np.savez_compressed(f, **saved)


def write(run_dir, records_dir, keys, role: str = "run",
          replace: bool = False, command: str | None = None) -> str:
  """Records `run_dir` (a training workdir, or a record); the record's path.

  `keys`: the metrics kept; `role`: "run" or "replicate" (the same config
  and seed again). A record of that name from another run directory is an
  error unless `replace`. `command`: the launch command (None: the source
  record's).
  """
  if role not in ROLES:
    raise ValueError(f"role must be one of {ROLES}, got {role!r}.")
  src = pathlib.Path(run_dir)
  if not (src / "members.json").is_file():
    raise ValueError(f"{run_dir} is not a training run directory (no "
                     "members.json): give launch/train.py's --workdir.")
  source, came_from = read(src), origin(src)
  dest = pathlib.Path(records_dir) / f"{role}s" / name_of(came_from)
  held = read(dest).get("run_dir")        # None where no record is there
  if (held and not replace
      and os.path.abspath(held) != os.path.abspath(came_from)):
    raise ValueError(
        f"{dest} records {held}; {came_from} has the same name (a record "
        "is named after its run directory's basename) and would replace it. "
        "Rename this run's directory, give it as a replicate (--replicates) "
        "if it trains that run's config and seed again, or delete the "
        "record first to replace it.")
  tmp = dest.with_name(dest.name + ".tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  for name in _COPIED:
    if (src / name).is_file():
      shutil.copyfile(src / name, tmp / name)
  for member in json.loads((src / "members.json").read_text()):
    (tmp / member["dir"]).mkdir(parents=True, exist_ok=True)
    _filter_metrics(src / member["dir"], tmp / member["dir"], set(keys))
  extra = {"command": command} if command else {}
  (tmp / RECORD).write_text(json.dumps(
      {**source, "run_dir": came_from, "role": role,
       "keys": sorted(set(keys)), **extra}, indent=1) + "\n")
  shutil.rmtree(dest, ignore_errors=True)
  tmp.rename(dest)
  return str(dest)


def listed(records_dir, role: str = "run") -> list[str]:
  """The records of `role` in `records_dir`, by name ([] if none)."""
  root = pathlib.Path(records_dir) / f"{role}s"
  if not root.is_dir():
    return []
  return [str(p) for p in sorted(root.iterdir())
          if (p / RECORD).is_file() and not p.name.endswith(".tmp")]
