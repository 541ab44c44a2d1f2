"""REPRODUCTION.md from training run directories (paper Sec. 7, Figs. 6-12).

`write_report(run_dirs, out_path)` reads the runs (`run_cells`), judges
the claims (`verdicts`, `claims`), opens with the answer (`answer`) and
writes the report with `summary.csv`, `summary.json` and the figures. With
`records_dir` it records each run first (`qkspec.records.store`) and
reports on every record there, so it regenerates without the runs.
"""
import csv
import json
import os
import pathlib

from qkspec.records import store
from qkspec.report import claims
from qkspec.report import floors
from qkspec.report import locater_minimum
from qkspec.report import pooled
from qkspec.report import replicates
from qkspec.report import run_cells
from qkspec.report import sections
from qkspec.report import verdicts


def write_summary(rows, directory, judged, spread) -> list[str]:
  """Writes summary.csv and summary.json in `directory`; their paths."""
  os.makedirs(directory, exist_ok=True)
  csv_path = os.path.join(directory, "summary.csv")
  fields = [k for k in rows[0] if not k.endswith("_values")]
  with open(csv_path, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for r in rows:
      w.writerow({**r, "seeds": " ".join(map(str, r["seeds"])),
                  "run_dirs": " ".join(r["run_dirs"]),
                  "commands": " ; ".join(r["commands"])})
  json_path = os.path.join(directory, "summary.json")
  with open(json_path, "w") as f:
    json.dump(dict(rows=rows, verdicts=judged, rerun_spread=spread), f,
              indent=1, default=str)
  return [csv_path, json_path]


def _figures_dir(out_path, figures_dir=None) -> pathlib.Path:
  """`figures_dir`, by default `reproduction/` next to `out_path`."""
  return pathlib.Path(figures_dir or pathlib.Path(out_path).parent
                      / "reproduction")


def default_records_dir(out_path, figures_dir=None) -> str:
  """`records/` in the figures' directory (`_figures_dir`)."""
  return str(_figures_dir(out_path, figures_dir) / "records")


def keep_records(run_dirs, records_dir, replicate_dirs=()
                 ) -> tuple[list[str], list[str]]:
  """Records the runs in `records_dir`; (run, replicate) records there."""
  for role, dirs in (("run", run_dirs), ("replicate", replicate_dirs)):
    names = [store.name_of(store.origin(d)) for d in dirs]
    if len(set(names)) < len(names):
      raise ValueError(f"two {role} directories share a name ({names}): a "
                       "record is named after its run directory's basename.")
    for d in dirs:
      config = run_cells.load_config(d)
      command = run_cells.config_command(config, store.origin(d))
      store.write(d, records_dir, run_cells.record_keys(config),
                        role, command=command)
  return (store.listed(records_dir, "run"),
          store.listed(records_dir, "replicate"))


def _replicates(replicate_dirs) -> tuple[list[dict], list[dict]]:
  """(the replicate runs loaded, the spreads records kept without runs)."""
  kept = [store.read(d).get("spread") for d in replicate_dirs]
  return (run_cells.load_runs(
      [d for d, s in zip(replicate_dirs, kept) if s is None]),
          [s for s in kept if s is not None])


def _spread(runs, loaded, kept) -> dict:
  """`replicates.by_reading` of the replicates (and spreads records kept)."""
  quantities = [(n, k) for n, k, _ in run_cells.QUANTITIES]
  return replicates.by_reading(runs, loaded, quantities,
                               {r["reading"] for r in runs}, kept)


def _judge(runs, rows, by_cell, reruns) -> tuple:
  """(cell verdicts, stripe verdicts, kappa2 curves, pooled tests with
  Holm, the family of every test)."""
  members = {k: run_cells.cell_members(c)[0] for k, c in by_cell.items()}
  vs = locater_minimum.annotate(verdicts.verdicts(rows, members, reruns),
                                rows)
  stripe_vs = claims.stripe_verdicts(runs)
  trends = verdicts.trends(rows, reruns)
  tests = pooled.claim_tests(vs)
  family = pooled.family(vs, trends, stripe_vs, tests)
  return vs, stripe_vs, trends, pooled.with_holm(tests, family), family


def _command(run_dirs, replicate_dirs, records_dir, out_path) -> str:
  """The launch/report.py command that writes `out_path` from these runs
  (or, with `records_dir`, from the records)."""
  flags = [] if records_dir else [
      f"--{flag} {','.join(map(str, dirs))}" for flag, dirs in
      (("runs", run_dirs), ("replicates", replicate_dirs)) if dirs]
  return " ".join(["python launch/report.py", *flags, f"--out {out_path}"])


def write_report(run_dirs, out_path, figures_dir=None, command=None,
                 replicate_dirs=(), records_dir=None) -> list:
  """Writes `out_path` (markdown), the summary and figures; their paths.

  `replicate_dirs`: runs repeating a run of `run_dirs` (same config and
  seed). `records_dir`: record the runs there and report on every record
  it holds. `command`: the launch/report.py command it names (by default
  the one that writes `out_path` from these runs or records).
  """
  out_path = pathlib.Path(out_path)
  command = command or _command(run_dirs, replicate_dirs, records_dir,
                                out_path)
  if records_dir is not None:
    run_dirs, replicate_dirs = keep_records(run_dirs, records_dir,
                                            replicate_dirs)
    if not run_dirs:
      raise ValueError(f"no run records in {records_dir}: give run "
                       "directories (launch/report.py --runs).")
  runs = run_cells.load_runs(run_dirs)
  rows = run_cells.summarize_runs(runs)
  if not rows:
    raise ValueError("no members found in the run directories.")
  by_cell = run_cells.cells(runs)
  loaded, kept = _replicates(replicate_dirs)
  reruns = floors.rerun_reference(runs, loaded)
  vs, stripe_vs, trends, tests, family = _judge(runs, rows, by_cell, reruns)
  spread = _spread(runs, loaded, kept)
  page = sections.Page(out_path, _figures_dir(out_path, figures_dir))
  summary = write_summary(rows, page.directory,
                          vs + stripe_vs + trends + tests, spread)
  parts = [sections.title(command, records_dir, page),
           sections.answer_section(vs, stripe_vs, trends, tests),
           sections.rules_section(rows, reruns, family),
           sections.every_verdict(vs, stripe_vs),
           sections.kappa2_curve(trends),
           sections.locater_minimum_section(rows),
           sections.figures_section(rows, by_cell, page),
           sections.still_to_run(rows, runs, stripe_vs),
           sections.rerun_spread(spread),
           sections.runs_section(runs),
           sections.deviations(rows)]
  md = parts[0]
  for part in parts[1:]:
    if part:                            # a section, after a blank line
      md += [""] + part
  out_path.parent.mkdir(parents=True, exist_ok=True)
  out_path.write_text("\n".join(md) + "\n")
  return [str(out_path)] + summary + page.paths
