"""Run records: what the report reads of a training run, small enough to keep.

A `launch/train.py` workdir holds checkpoints and every logged metric (tens
of MB for a Fig. 12 sweep); REPRODUCTION.md reads only its `config.json`,
`members.json`, `run_info.jsonl` and, of each member's `metrics.jsonl`, a
few metrics (`report_runs.record_keys`). `write(run_dir, records_dir,
keys)` copies just that into `records_dir/<role>s/<name>/` (`name`: the run
directory's basename), with `record.json` naming the directory it came
from and the command that trained it, as it was run. A record is a run
directory to `report_runs.load_runs`, so the report is regenerated from
the repository alone, on machines where the runs never were (the paper's
runs were trained on GPU machines and not kept).

A record made again (a resumed run, trained further) replaces the old one.

Records rebuilt from an earlier report when the run itself was lost say so
in `record.json` ("source") and may hold less: final values only (one
logged step), the stripe test's result in `members.json` ("stripes")
instead of the rho map, or, for a replicate, its measured spread
("spread") instead of members.
"""
import json
import os
import pathlib
import shutil

RECORD = "record.json"
ROLES = ("run", "replicate")
_COPIED = ("config.json", "members.json", "run_info.jsonl")
_METRICS = "metrics.jsonl"


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


def _filter_metrics(src: pathlib.Path, dest: pathlib.Path, keys) -> None:
  """`src`'s records reduced to `keys` (lines left empty are dropped)."""
  keep = []
  for line in src.read_text(encoding="utf-8").splitlines():
    if not line.strip():
      continue
    rec = json.loads(line)
    kept = {k: v for k, v in rec.items() if k in keys}
    if kept:
      keep.append(json.dumps({"step": rec["step"], **kept}))
  dest.write_text("".join(x + "\n" for x in keep), encoding="utf-8")


def write(run_dir, records_dir, keys, role: str = "run",
          replace: bool = False, command: str | None = None) -> str:
  """Records `run_dir` (a training workdir, or a record) in `records_dir`.

  Args:
    run_dir: has `config.json`, `members.json` and each member's
      `metrics.jsonl` (`run_info.jsonl` is copied when present).
    records_dir: the records' root; this one goes to `<role>s/<name>/`,
      replacing a record of that name made from the same run directory
      (another run's record of that name is an error: another run's `fig6`
      must not replace the report's).
    keys: the metric names kept (`report_runs.record_keys`).
    role: "run" or "replicate" (a run trained again to measure the
      run-to-run spread, `report.write_report`'s replicate_dirs).
    replace: replace a record of that name whatever run it came from (runs
      trained elsewhere that carry the names of the records they extend).
    command: the launch command that trained it, kept as it was run (the
      code's config fields may change after); None: the source's, if any.
  Returns:
    The record's path.
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
    _filter_metrics(src / member["dir"] / _METRICS,
                    tmp / member["dir"] / _METRICS, set(keys))
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
