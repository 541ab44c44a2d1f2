"""The report's runs: what of each run it reads, merged per figure and reading.

`load_runs` reads each training workdir (or its `records.store` record) into
one dict per run and reading of kappa; `summarize_runs` makes one row per
figure, reading and member group (members that differ only in seed): mean
and std over seeds of the final `QUANTITIES`. `figure_of` names the paper
figure from the config: configs/rho_training.py's sweep is Fig. 7, else
(num_layers, d) picks Figs. 6, 8-12 (smoke runs: d / 8).
"""
import collections
import json
import math
import pathlib

import numpy as np

from qkspec.config import defaults
from qkspec.records import rundir
from qkspec.records import store
from qkspec.report import commands

PAPER_STEPS = 50_000
FIGURES = {(1, 128): "6", (1, 32): "8", (3, 32): "9", (6, 32): "10",
           (3, 128): "11", (6, 128): "12"}          # (L, d) -> paper figure
QUANTITIES = (("valid_ppl", "valid/ppl", "valid ppl"),
              ("test_ppl", "test/ppl", "test ppl"),
              ("scale", "mean/qk_scale", "scale tr(W^T W)"),
              ("trace", "mean/qk_trace", "trace tr(W)"),
              ("entropy", "mean/entropy", "entropy (nats)"))
READINGS = {k: f"{name} ({k})"       # "literal (mean_loss)", ...
            for k, name in rundir.READING_NAMES.items()}


def reading_name(reading: str) -> str:
  """"literal (mean_loss)" for "mean_loss" (a name it does not know as is)."""
  return READINGS.get(reading, reading)


def label_order(label: str) -> tuple:
  """Sort key: "Fig. 6", "Fig. 6 (smoke)", "Fig. 10"."""
  number = label.split()[1] if len(label.split()) > 1 else ""
  return (int(number) if number.isdigit() else math.inf, label)


def cell_order(item) -> tuple:
  """Sort key of a ((label, reading), value) item."""
  (label, reading), _ = item
  return label_order(label), reading



def load_config(run_dir):
  """A run's (or record's) config.json as a dict."""
  return json.loads((pathlib.Path(run_dir) / "config.json").read_text())


def figure_of(config: dict) -> tuple[str, bool]:
  """(paper figure id, smoke?) of a run's config.json dict."""
  smoke = config.get("data", {}).get("name") == "synthetic"
  sweep = config.get("sweep", {})
  pairs = set(zip(sweep.get("kappa1") or (), sweep.get("kappa2") or ()))
  if pairs == {(100.0, 1.0), (0.0, 0.0)}:     # configs/rho_training.py
    return "7", smoke
  model = config["model"]
  d = model["d_model"] * (8 if smoke else 1)
  return FIGURES.get((model["num_layers"], d),
                     f"L={model['num_layers']},d={model['d_model']}"), smoke


def config_command(config: dict, run_dir: str) -> str:
  """The launch command that rebuilds `config`: its figure's config file
  and argument, and a `--config.x=y` per field that differs."""
  fig, smoke = figure_of(config)
  name, parts = config_file(fig, config["model"]["num_layers"],
                            config["model"]["d_model"] * (8 if smoke else 1))
  sweep = config.get("sweep", {})
  kappa2 = swept_kappa2(config)
  if fig != "7" and kappa2 and kappa2 != list(defaults.KAPPA2_SWEEP):
    parts.append("kappa2=" + ",".join(f"{k:g}" for k in kappa2))
  seeds = set(sweep.get("seed") or ())
  if len(seeds) > 1:
    parts.append(f"seeds={len(seeds)}")
  elif config.get("seed"):
    parts.append(f"seed={config['seed']}")     # one seed alone
  if fig != "7" and 0.0 in (sweep.get("kappa1") or ()):
    parts.append("contrast")                   # a no-LocATER member
  elif (fig != "7" and not sweep.get("kappa1") and not sweep.get("kappa2")
        and config["locater"]["kappa1"] == 0
        and config["locater"]["kappa2"] == 0):
    parts.append("none")                       # that member alone
  if sweep.get("penalty_added_to"):
    parts.append("both_readings")              # side by side, one program
  elif config["locater"].get("penalty_added_to") == "summed_loss":
    parts.append("fairseq")
  if smoke:
    parts.append("smoke")
  arg = ",".join(parts)
  path = f"configs/{name}.py" + (f":{arg}" if arg else "")
  overrides = []
  try:
    # pylint: disable=g-import-not-at-top
    from qkspec.config import args as args_lib
    base = json.loads(args_lib.load_config_file(
        commands.REPO / "configs" / f"{name}.py", arg).to_json())
    overrides = [f"--config.{k}={_flag_value(v)}"
                 for k, v in _diff(base, config)]
  except (ValueError, OSError, KeyError) as e:
    path += f" (not rebuilt exactly: {e})"
  return " ".join(["python launch/train.py", f"--config {path}", *overrides,
                   f"--workdir {run_dir}"])


def swept_kappa2(config: dict) -> list[float]:
  """The LocATER members' kappa2 (kappa1 > 0) in a config, each once."""
  sweep = config.get("sweep", {})
  kappa2 = list(sweep.get("kappa2") or ())
  kappa1 = list(sweep.get("kappa1") or ()) or [
      config["locater"]["kappa1"]] * len(kappa2)
  return list(dict.fromkeys(k2 for k1, k2 in zip(kappa1, kappa2) if k1 > 0))


def config_file(fig: str, layers: int, d: int) -> tuple[str, list[str]]:
  """(configs/ module, its arguments) of figure `fig` (model L x d)."""
  if fig in ("6", "7"):
    return ("locater_wt2" if fig == "6" else "rho_training"), []
  return "depth_width", [f"L={layers}", f"d={d}"]


def _diff(base, new, prefix=""):
  out = []
  for k, v in new.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict) and isinstance(base.get(k), dict):
      out += _diff(base[k], v, key + ".")
    elif base.get(k, object()) != v:
      out.append((key, v))
  return out


def _flag_value(v):
  """A `--config.x=` value: a tuple as the shell should pass it, quoted."""
  if isinstance(v, (list, tuple)):
    return '"(' + ", ".join(repr(x) for x in v) + ("," * (len(v) == 1)) + ')"'
  return repr(v) if isinstance(v, str) and not v else str(v)


def seed_groups(members) -> dict:
  """(kappa1, kappa2, target) -> the members that differ only in seed."""
  groups = {}
  for m in members:
    groups.setdefault((m["kappa1"], m["kappa2"], m["target"]), []).append(m)
  return groups


def last_step(member) -> int:
  """The member's last step: train/loss's, else any metric's; 0 if none."""
  metrics = member["metrics"]
  loss = metrics.get("train/loss")
  if loss is not None and len(loss[0]):
    return int(loss[0][-1])
  return max((int(s[-1]) for s, _ in metrics.values() if len(s)), default=0)


def load_runs(run_dirs) -> list[dict]:
  """One dict per run dir and reading of kappa: figure, reading, command
  (as today's code runs it, `commands`; `trained_command` as trained, with
  the `commit` that first reported it), members (with their last step),
  steps run and planned.

  A record loads as its run (`run_dir` names the run, `path` where it was
  read), and a run's maps are read compacted as a record keeps them.
  """
  runs = []
  for path in run_dirs:
    config = load_config(path)
    fig, smoke = figure_of(config)
    reading = config["locater"].get("penalty_added_to", "mean_loss")
    run_dir = store.origin(path)
    record = store.read(path)                # {} for a run directory
    by_reading = {}
    for m in rundir.load_members(path):
      m["metrics"] = {k: store.compact(*v) if np.ndim(v[1]) == 2
                      else v for k, v in m["metrics"].items()}
      m["last_step"] = last_step(m)
      by_reading.setdefault(m.get("penalty_added_to", reading), []).append(m)
    run = dict(run_dir=run_dir, path=str(path), figure=fig, smoke=smoke,
               label=f"Fig. {fig}" + (" (smoke)" if smoke else ""),
               both_readings=len(by_reading) > 1,
               trained_command=(record.get("command")
                                or config_command(config, run_dir)),
               commit=record.get("commit"),
               d_model=int(config["model"]["d_model"]),
               num_layers=int(config["model"]["num_layers"]),
               seq_len=int(config["data"]["seq_len"]),
               num_steps=int(config["num_steps"]))
    run["command"] = commands.as_run_today(run["trained_command"])
    for member_reading, members in (by_reading or {reading: []}).items():
      runs.append(dict(
          run, reading=member_reading, members=members,
          final_step=min((m["last_step"] for m in members), default=0)))
  return runs


def cells(runs) -> dict:
  """(label, reading) -> the runs of that figure and reading of kappa.

  A no-LocATER member trains the same under either reading
  (tests/system/readings_test.py), so it also joins the other reading's cell, as
  a view of its run marked `shared_from`.
  """
  out = {}
  for run in runs:
    out.setdefault((run["label"], run["reading"]), []).append(run)
  for run in runs:
    shared = [m for m in run["members"]
              if m["kappa1"] == 0 and m["kappa2"] == 0]
    for reading in READINGS:
      if shared and reading != run["reading"]:
        out.setdefault((run["label"], reading), []).append(dict(
            run, members=[dict(m, penalty_added_to=reading)
                          for m in shared], reading=reading,
            shared_from=run["reading"],
            final_step=min(m["last_step"] for m in shared)))
  return out


def cell_members(cell_runs) -> tuple[list, list]:
  """(counted, left-out) members of one cell's runs: each (kappa1, kappa2,
  target, seed) once (the longest), counted only at the cell's longest
  step."""
  chosen = {}
  for run in cell_runs:
    for m in run["members"]:
      key = (m["kappa1"], m["kappa2"], m["target"], m["seed"])
      if key not in chosen or m["last_step"] > chosen[key]["last_step"]:
        chosen[key] = {**m, "run_dir": run["run_dir"]}
  full = max((m["last_step"] for m in chosen.values()), default=0)
  counted = [m for m in chosen.values() if m["last_step"] == full]
  return counted, [m for m in chosen.values() if m["last_step"] < full]


def summarize_runs(runs) -> list[dict]:
  """One row per figure, reading and member group, over every run."""
  rows = []
  for (label, reading), rs in cells(runs).items():
    counted, _ = cell_members(rs)
    for (kappa1, kappa2, target), ms in sorted(seed_groups(counted).items()):
      ms = sorted(ms, key=lambda m: m["seed"])    # values in `seeds` order
      run_dirs = sorted({m["run_dir"] for m in ms})
      row = dict(figure=rs[0]["figure"], label=label, smoke=rs[0]["smoke"],
                 reading=reading, run_dirs=run_dirs,
                 d_model=rs[0].get("d_model"),
                 num_layers=rs[0].get("num_layers"),
                 seq_len=rs[0].get("seq_len"),
                 kappa1=kappa1, kappa2=kappa2, target=target,
                 seeds=sorted(m["seed"] for m in ms), n_seeds=len(ms),
                 commands=list(dict.fromkeys(
                     r["command"] for r in rs if r["run_dir"] in run_dirs)),
                 final_step=min(m["last_step"] for m in ms),
                 num_steps=max(r["num_steps"] for r in rs
                               if r["run_dir"] in run_dirs))
      for name, key, _ in QUANTITIES:
        vals = [rundir.final_value(m["metrics"], key) for m in ms]
        finite = np.asarray([v for v in vals if np.isfinite(v)], float)
        row[f"{name}_mean"] = (float(finite.mean()) if finite.size
                               else math.nan)
        row[f"{name}_std"] = (float(finite.std(ddof=1)) if finite.size > 1
                              else math.nan)
        row[f"{name}_values"] = vals
      rows.append(row)
  return rows


def summarize(run_dirs) -> list[dict]:
  """`summarize_runs(load_runs(run_dirs))`."""
  return summarize_runs(load_runs(run_dirs))


def seed_mean(members) -> list[dict]:
  """Members differing only in seed -> one each, each metric averaged over
  seeds at the steps all logged."""
  out = []
  for ms in seed_groups(members).values():
    metrics = {}
    for key in set.intersection(*(set(m["metrics"]) for m in ms)):
      n = min(len(m["metrics"][key][0]) for m in ms)
      steps = [np.asarray(m["metrics"][key][0][:n]) for m in ms]
      if n and all(np.array_equal(steps[0], st) for st in steps):
        metrics[key] = (steps[0], np.mean(
            [np.asarray(m["metrics"][key][1][:n]) for m in ms], axis=0))
    out.append({**ms[0], "metrics": metrics, "n_seeds": len(ms)})
  return out


def _run_info_lines(run_dir) -> list[dict]:
  path = pathlib.Path(run_dir) / "run_info.jsonl"
  return ([json.loads(x) for x in path.read_text().splitlines() if x.strip()]
          if path.is_file() else [])


def wall_minutes(run_dir) -> float:
  """The wall minutes of every invocation of a run (`run_info.jsonl`), 0
  without it."""
  return sum(x["wall_s"] for x in _run_info_lines(run_dir)) / 60


def run_info(run_dir) -> str:
  """Device, precision and wall time (by phase) summed over the lines of
  `<run_dir>/run_info.jsonl`; "" without it."""
  lines = _run_info_lines(run_dir)
  if not lines:
    return ""
  devices = sorted({f"{x['device_count']} x {x['device_kind']}"
                    for x in lines})
  dtypes = sorted({x.get("compute_dtype", "float32") for x in lines})
  wall = sum(x["wall_s"] for x in lines)
  n = sum(x.get("invocations", 1) for x in lines)
  phases = "setup, compilation and evaluation included"   # before phases_s
  if all("phases_s" in x for x in lines):
    total = collections.Counter()
    for x in lines:
      total.update(x["phases_s"])
    phases = ", ".join(f"{k} {v:.0f} s" for k, v in total.items())
  return (f"{', '.join(devices)}; compute {'/'.join(dtypes)}; wall "
          f"{wall / 60:.1f} min in {n} invocation"
          f"{'s' if n > 1 else ''} ({phases})")


def record_keys(config: dict) -> list[str]:
  """The metrics the report reads: the QUANTITIES, valid/loss, train/loss
  and Fig. 7's layer-0 rho_i."""
  keys = [k for _, k, _ in QUANTITIES] + ["valid/loss", "train/loss"]
  if figure_of(config)[0] == "7":
    keys += list(rundir.rho_keys(0))
  return keys
