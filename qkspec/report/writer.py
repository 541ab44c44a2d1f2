"""REPRODUCTION.md from training run directories (paper Sec. 7, Figs. 6-12).

`write_report(run_dirs, out_path)` runs the report's phases once each:
read the runs (`run_cells`), judge them into one frozen
`evidence.Evidence`, render its sections (`sections`, figures saved on the
way) and write the markdown with `summary.csv` and `summary.json`. With
`records_dir` it records each run first (`qkspec.records.store`) and
reports on every record there, so it regenerates without the runs.
"""
import csv
import dataclasses
import json
import os
import pathlib

from qkspec.records import store
from qkspec.report import backlog
from qkspec.report import commands
from qkspec.report import evidence
from qkspec.report import floors
from qkspec.report import locater_minimum
from qkspec.report import pooled
from qkspec.report import run_cells
from qkspec.report import sections
from qkspec.report import stripes
from qkspec.report import verdicts


def _plain(x):
  """`x` for summary.json: a typed record as a dict, the fields of its
  `test` (a `verdicts.Test`) among its own."""
  if dataclasses.is_dataclass(x):
    fields = {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
    test = fields.pop("test", None)
    return _plain({**fields, **({} if test is None else _plain(test))})
  if isinstance(x, dict):
    return {k: _plain(v) for k, v in x.items()}
  if isinstance(x, (list, tuple, frozenset)):
    return [_plain(v) for v in (sorted(x) if isinstance(x, frozenset) else x)]
  return x


_ROW = ("figure", "label", "smoke", "reading", "run_dirs", "d_model",
        "num_layers", "seq_len", "kappa1", "kappa2", "target", "seeds",
        "n_seeds", "commands", "final_step", "num_steps")    # summary.csv


def summary_row(g, commands) -> dict:
  """summary.csv's and summary.json's row of a `run_cells.Group`, with its
  runs' `commands` (run directory -> command)."""
  lists = dict(run_dirs=list(g.run_dirs), seeds=list(g.seeds),
               n_seeds=g.n_seeds, commands=list(dict.fromkeys(
                   commands[d] for d in g.run_dirs)))
  out = {k: lists[k] if k in lists else getattr(g, k) for k in _ROW}
  for name, _, _ in run_cells.QUANTITIES:
    out.update({f"{name}_mean": g.mean[name], f"{name}_std": g.std[name],
                f"{name}_values": list(g.values[name])})
  return out


def write_summary(ev, directory) -> list[str]:
  """Writes summary.csv and summary.json in `directory`; their paths."""
  os.makedirs(directory, exist_ok=True)
  rows = [summary_row(g, ev.commands) for g in ev.groups]
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
    json.dump(dict(rows=rows, verdicts=_plain(ev.verdicts),
                   stripes=_plain(ev.stripes), trends=_plain(ev.trends),
                   pooled=[dict(_plain(t), holds=t.holds)
                           for t in ev.pooled],
                   rerun_spread=ev.spread), f, indent=1, default=str)
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
      command = commands.config_command(config, store.origin(d),
                                        *run_cells.figure_of(config))
      store.write(d, records_dir, run_cells.record_keys(config),
                  role, command=command)
  return (store.listed(records_dir, "run"),
          store.listed(records_dir, "replicate"))


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
  runs = run_cells.load_runs(run_dirs)                        # read
  if not any(r.members for r in runs):
    raise ValueError("no members found in the run directories.")
  replicate_runs, kept = run_cells.load_replicates(replicate_dirs)
  cells = run_cells.cells(runs)
  groups = tuple(g for c in cells.values() for g in c.groups)
  pairs = floors.pairs(runs, replicate_runs)                  # judge
  seed_refs = floors.seed_references(cells)
  reruns = floors.rerun_references(pairs)
  held = floors.candidates(seed_refs, reruns)
  spread, rerun_pairs = (floors.by_reading(pairs, kept),
                         floors.reruns(runs + replicate_runs, pairs, kept))
  minimum = locater_minimum.compare(groups)
  vs = verdicts.verdicts(cells, held, locater_minimum.at_minimum(minimum))
  trends = verdicts.trends(cells, held)
  found = stripes.results(runs)
  stripe_vs = stripes.stripe_verdicts(cells, found)
  ev = evidence.Evidence(
      runs=runs, commands=commands.by_run(runs), cells=cells, groups=groups,
      seed_refs=seed_refs, reruns=reruns, spread=spread,
      rerun_pairs=rerun_pairs, verdicts=vs, trends=trends,
      pooled=pooled.claim_tests(vs), stripe_results=found,
      stripes=stripe_vs, minimum=minimum,
      backlog=backlog.plan(groups, stripe_vs, runs))
  page = sections.Page(out_path, _figures_dir(out_path, figures_dir))
  summary = write_summary(ev, page.directory)                 # write
  md = sections.render(ev, page, command, records_dir)        # render
  out_path.parent.mkdir(parents=True, exist_ok=True)
  out_path.write_text("\n".join(md) + "\n")
  return [str(out_path)] + summary + page.paths
