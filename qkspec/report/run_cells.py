"""The report's runs read back, and merged per figure and reading of kappa.

The read phase of the report (read -> judge -> render -> write): the only
module that opens a run's files. `load_runs` reads each training workdir
(or its `records.store` record) into one `Run` per reading of kappa;
`cells` merges them into one `Cell` per figure and reading: its counted
members (each member once) and its member `Group`s (members that differ
only in seed), with mean and std over seeds of the final `QUANTITIES`.
`figure_of` names the paper figure from the config: configs/rho_training.py's
sweep is Fig. 7, else (num_layers, d) picks Figs. 6, 8-12 (smoke runs: d / 8).
"""
import dataclasses
import json
import math
import pathlib
from typing import Mapping

import numpy as np

from qkspec.records import rundir
from qkspec.records import store

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


def figure_label(figure: str, smoke: bool) -> str:
  """"Fig. 6", "Fig. 6 (smoke)": the label of a figure's runs and cells."""
  return f"Fig. {figure}" + (" (smoke)" if smoke else "")


def label_order(label: str) -> tuple:
  """Sort key: "Fig. 6", "Fig. 6 (smoke)", "Fig. 10"."""
  number = label.split()[1] if len(label.split()) > 1 else ""
  return (int(number) if number.isdigit() else math.inf, label)


def cell_order(key) -> tuple:
  """Sort key of a (label, reading) cell key."""
  label, reading = key
  return label_order(label), reading


def load_config(run_dir) -> dict:
  """A run's (or record's) config.json as a dict."""
  return json.loads((pathlib.Path(run_dir) / "config.json").read_text())


def figure_of(config: Mapping) -> tuple[str, bool]:
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


def member_key(member) -> tuple:
  """(kappa1, kappa2, target, seed): what tells members of a figure apart."""
  return (member["kappa1"], member["kappa2"], member["target"],
          member["seed"])


def is_locater(member) -> bool:
  """Does the member train with LocATER (either strength > 0)?"""
  return member["kappa1"] > 0 or member["kappa2"] > 0


@dataclasses.dataclass(frozen=True)
class Run:
  """One training run under one reading of kappa, as read.

  `members`: rundir's entries, each with its `last_step`, its `final`
  values of the `QUANTITIES`, its `run_dir` and a `key` (run_dir, index)
  that names it wherever it is viewed; `shared_from`: a view of another
  reading's run, its no-LocATER member alone (`cells`).
  """
  run_dir: str                 # the run it came from (a record names it)
  path: str                    # where it was read
  config: Mapping
  record: Mapping              # record.json ({} for a run directory)
  info: tuple                  # run_info.jsonl's lines
  reading: str
  members: tuple
  both_readings: bool
  figure: str
  smoke: bool
  shared_from: str | None = None

  @property
  def label(self) -> str:
    return figure_label(self.figure, self.smoke)

  @property
  def arch(self) -> tuple[int, int]:
    """(layers, d)."""
    return self.num_layers, self.d_model

  @property
  def num_layers(self) -> int:
    return int(self.config["model"]["num_layers"])

  @property
  def d_model(self) -> int:
    return int(self.config["model"]["d_model"])

  @property
  def seq_len(self) -> int:
    return int(self.config["data"]["seq_len"])

  @property
  def num_steps(self) -> int:
    return int(self.config["num_steps"])

  @property
  def data_seed(self) -> int:
    """The seed of the batch order (`data.seed`), the same for every
    member of the run."""
    return int(self.config["data"].get("seed", 0))

  @property
  def trained_command(self) -> str | None:
    """The command its record kept (None for a run directory: see
    `commands.today`)."""
    return self.record.get("command")

  @property
  def commit(self) -> str | None:
    return self.record.get("commit")

  @property
  def final_step(self) -> int:
    return min((m["last_step"] for m in self.members), default=0)

  @property
  def devices(self) -> tuple[str, ...]:
    """The device kinds its invocations ran on."""
    return tuple(sorted({x["device_kind"] for x in self.info}))

  @property
  def wall_minutes(self) -> float:
    """The wall minutes of every invocation (`run_info.jsonl`), 0 without
    it."""
    return sum(x["wall_s"] for x in self.info) / 60


def _members(path, reading) -> dict[str, list[dict]]:
  """reading -> the run's members, each with its last step and final
  values; a run's maps compacted as a record keeps them."""
  by_reading = {}
  for m in rundir.load_members(path):
    m.update(last_step=rundir.last_step(m), final={
        name: rundir.final_value(m["metrics"], key)
        for name, key, _ in QUANTITIES})
    m["metrics"] = {k: store.compact(*v) if np.ndim(v[1]) == 2
                    else v for k, v in m["metrics"].items()}
    by_reading.setdefault(m.get("penalty_added_to", reading), []).append(m)
  return by_reading


def _run_info(path) -> tuple[dict, ...]:
  f = pathlib.Path(path) / "run_info.jsonl"
  return tuple(json.loads(x) for x in f.read_text().splitlines()
               if x.strip()) if f.is_file() else ()


def load_runs(run_dirs) -> tuple[Run, ...]:
  """One `Run` per run dir (or record) and reading of kappa, in order.

  A record loads as its run (`run_dir` names the run, `path` where it was
  read), and a run's maps are read compacted as a record keeps them. Each
  member gets its `run_dir` and a `key` (run_dir, index) that names it
  wherever it is viewed.
  """
  runs = []
  for path in run_dirs:
    config, info = load_config(path), _run_info(path)
    fig, smoke = figure_of(config)
    reading = config["locater"].get("penalty_added_to", "mean_loss")
    by_reading = _members(path, reading) or {reading: []}
    run_dir, record = store.origin(path), store.read(path)
    i = 0
    for member_reading, members in by_reading.items():
      runs.append(Run(run_dir=run_dir, path=str(path), config=config,
                      record=record, info=info, reading=member_reading,
                      members=tuple(dict(m, run_dir=run_dir,
                                         key=(run_dir, i + j))
                                    for j, m in enumerate(members)),
                      both_readings=len(by_reading) > 1, figure=fig,
                      smoke=smoke))
      i += len(members)
  return tuple(runs)


def load_replicates(replicate_dirs) -> tuple[tuple[Run, ...], tuple]:
  """(the replicate runs loaded, the (reading, run directory, spread) of
  each record kept as its spread alone, without members)."""
  records = [(d, store.read(d)) for d in replicate_dirs]
  for d, record in records:
    if "spread" in record and record.get("reading") not in READINGS:
      raise ValueError(f"{d}: a replicate record kept as its spread alone "
                       "names its reading of kappa (\"reading\": one of "
                       f"{sorted(READINGS)}).")
  return (load_runs([d for d, record in records if "spread" not in record]),
          tuple((record["reading"], record["run_dir"], record["spread"])
                for _, record in records if "spread" in record))


@dataclasses.dataclass(frozen=True)
class Group:
  """Members of one figure and reading that differ only in seed: a row of
  summary.csv (`writer.summary_row`). `values`: quantity -> the final
  values in `seeds` order; `mean`, `std`: quantity -> their mean and std
  over the finite ones (`group`)."""
  figure: str
  smoke: bool
  reading: str
  run_dirs: tuple[str, ...]
  d_model: int
  num_layers: int
  seq_len: int
  kappa1: float
  kappa2: float
  target: float
  seeds: tuple[int, ...]
  final_step: int
  num_steps: int
  values: Mapping[str, tuple[float, ...]]
  mean: Mapping[str, float]
  std: Mapping[str, float]

  @property
  def label(self) -> str:
    return figure_label(self.figure, self.smoke)

  @property
  def n_seeds(self) -> int:
    return len(self.seeds)

  @property
  def arch(self) -> tuple[int, int]:
    return self.num_layers, self.d_model

  @property
  def locater(self) -> bool:
    return self.kappa1 > 0 or self.kappa2 > 0

  @property
  def identity(self) -> tuple:
    """Which members it is: architecture, strengths and seeds, and its
    reading unless it has no LocATER (that member trains the same under
    either reading). Two copies of a member (the same config and seed
    trained twice) are one."""
    return (self.arch, self.kappa1, self.kappa2, self.target, self.seeds,
            self.reading if self.locater else None)


def group(values: Mapping[str, tuple], **fields) -> Group:
  """A `Group` of `fields` whose `values` (quantity -> per-seed final
  values) give its mean and std over the finite ones."""
  finite = {q: [v for v in vs if np.isfinite(v)] for q, vs in values.items()}
  return Group(values={q: tuple(vs) for q, vs in values.items()},
               mean={q: float(np.mean(f)) if f else math.nan
                     for q, f in finite.items()},
               std={q: float(np.std(f, ddof=1)) if len(f) > 1 else math.nan
                    for q, f in finite.items()}, **fields)


def paired(base: Group, alt: Group, quantity: str
           ) -> tuple[tuple[int, ...], np.ndarray]:
  """(common seeds, per-seed alt - base) of a quantity's final values."""
  b = dict(zip(base.seeds, base.values[quantity]))
  a = dict(zip(alt.seeds, alt.values[quantity]))
  seeds = tuple(sorted(set(a) & set(b)))
  return seeds, np.array([a[s] - b[s] for s in seeds], np.float64)


@dataclasses.dataclass(frozen=True)
class Contrast:
  """Two groups of a cell compared: "kappa2", kappa2 = 0 -> 1 at
  kappa1 > 0, or "none", no LocATER -> kappa2 = 1 (else the strongest),
  paired by seed (`diffs`: quantity -> per-seed alt - base)."""
  kind: str
  base: Group
  alt: Group
  seeds: tuple[int, ...]
  diffs: Mapping[str, np.ndarray]


def contrasts(groups) -> tuple[Contrast, ...]:
  """The `Contrast`s of one cell's groups."""
  pairs = []
  base, alt = [next((g for g in groups if g.kappa1 > 0 and g.kappa2 == k),
                    None) for k in (0.0, 1.0)]
  if base and alt:
    pairs.append(("kappa2", base, alt))
  none = next((g for g in groups if not g.locater), None)
  locater = [g for g in groups if g.kappa1 > 0]
  if none and locater:
    pairs.append(("none", none, alt or max(locater, key=lambda g: g.kappa2)))
  out = []
  for kind, b, a in pairs:
    found = {q: paired(b, a, q) for q in a.values}
    out.append(Contrast(kind=kind, base=b, alt=a,
                        seeds=next(iter(found.values()))[0] if found else (),
                        diffs={q: d for q, (_, d) in found.items()}))
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class Cell:
  """One figure and reading of kappa: its runs (a no-LocATER member of the
  other reading's run as a view), its counted members (each
  (kappa1, kappa2, target, seed) once, at the cell's longest step), those
  left out (stopped earlier), its `Group`s and their `Contrast`s."""
  label: str
  figure: str
  reading: str
  runs: tuple[Run, ...]
  counted: tuple[dict, ...]
  left_out: tuple[dict, ...]
  groups: tuple[Group, ...]
  contrasts: tuple[Contrast, ...]


def _views(runs) -> dict[tuple[str, str], list[tuple[int, Run]]]:
  """(label, reading) -> (position in `runs`, run or view) of its runs.

  A no-LocATER member trains the same under either reading
  (tests/system/readings_test.py), so it also joins the other reading's
  cell, as a view of its run marked `shared_from`.
  """
  out = {}
  for i, run in enumerate(runs):
    out.setdefault((run.label, run.reading), []).append((i, run))
  for i, run in enumerate(runs):
    shared = [m for m in run.members if not is_locater(m)]
    for reading in READINGS:
      if shared and reading != run.reading:
        out.setdefault((run.label, reading), []).append((i, dataclasses.replace(
            run, members=tuple(dict(m, penalty_added_to=reading)
                               for m in shared),
            reading=reading, shared_from=run.reading)))
  return out


def cell_members(placed) -> tuple[list, list]:
  """(counted, left out) of a cell's (position, run) pairs: each
  (kappa1, kappa2, target, seed) once, the longest copy, of two as long the
  one of the run listed first (a member trained twice is one member);
  counted only at the cell's longest step."""
  chosen = {}                          # key -> (-last step, position, member)
  for i, run in placed:
    for m in run.members:
      copy = (-m["last_step"], i, m)
      key = member_key(m)
      if key not in chosen or copy[:2] < chosen[key][:2]:
        chosen[key] = copy
  ms = [m for _, _, m in chosen.values()]
  full = max((m["last_step"] for m in ms), default=0)
  return ([m for m in ms if m["last_step"] == full],
          [m for m in ms if m["last_step"] < full])


def _group(reading, rs, members) -> Group:
  """The `Group` of one cell's members that differ only in seed."""
  ms = sorted(members, key=lambda m: m["seed"])    # values in seed order
  run_dirs = tuple(sorted({m["run_dir"] for m in ms}))
  mine = [r for r in rs if r.run_dir in run_dirs]
  return group(
      {name: tuple(m["final"][name] for m in ms) for name, _, _ in QUANTITIES},
      figure=rs[0].figure, smoke=rs[0].smoke, reading=reading,
      run_dirs=run_dirs, d_model=rs[0].d_model, num_layers=rs[0].num_layers,
      seq_len=rs[0].seq_len, kappa1=ms[0]["kappa1"], kappa2=ms[0]["kappa2"],
      target=ms[0]["target"], seeds=tuple(m["seed"] for m in ms),
      final_step=min(m["last_step"] for m in ms),
      num_steps=max(r.num_steps for r in mine))


def cells(runs) -> dict[tuple[str, str], Cell]:
  """(label, reading) -> its `Cell`, in figure order, over every run."""
  out = {}
  for (label, reading), placed in sorted(_views(runs).items(),
                                         key=lambda kv: cell_order(kv[0])):
    counted, left_out = cell_members(placed)
    rs = tuple(run for _, run in placed)
    groups = {}
    for m in counted:
      groups.setdefault(member_key(m)[:3], []).append(m)
    made = tuple(_group(reading, rs, ms)
                 for _, ms in sorted(groups.items()))
    out[label, reading] = Cell(
        label=label, figure=rs[0].figure, reading=reading, runs=rs,
        counted=tuple(counted), left_out=tuple(left_out), groups=made,
        contrasts=contrasts(made))
  return out


def record_keys(config: Mapping) -> list[str]:
  """The metrics the report reads: the QUANTITIES, valid/loss, train/loss
  and Fig. 7's layer-0 rho_i."""
  keys = [k for _, k, _ in QUANTITIES] + ["valid/loss", "train/loss"]
  if figure_of(config)[0] == "7":
    keys += list(rundir.rho_keys(0))
  return keys
