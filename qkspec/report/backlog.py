"""What the report still lacks: the GPU backlog, in priority order.

1. Fig. 7 with its rho maps kept, both readings: the shift test
   (`stripes`) needs the maps, which the records of the earlier runs lack.
2. The no-LocATER member with `SEEDS` seeds for Fig. 6 and for Fig. 10's
   architecture (L = 6, d = 32), both readings, so that the "none" contrast
   is paired over seeds rather than held to a one-seed floor.
3. Fig. 6 with kappa2 = `STRONG`, strong enough for tr(W_QK) to reach its
   target 1 (W* = cI has trace kappa2 d / (kappa1 + kappa2 d): 0.93 to
   0.999 at d = 128), both readings: is "no effect" a property of the
   paper's kappa2 range?
4. `SEEDS` seeds for Figs. 8-12 (their sweep and no-LocATER member).

`still_to_run` gives each item with the commands that train what is
missing and its projected GPU minutes (`project`): the members it trains x
the median minutes per member of the recorded runs of that architecture
nearest to it in members (their `run_info.jsonl` wall time, setup and
compilation included, on the GPUs they ran on).
"""
import math

import numpy as np

from qkspec.config import args as args_lib
from qkspec.config import defaults
from qkspec.report import commands
from qkspec.report import run_cells
from qkspec.training import sweep as sweep_lib

SEEDS = 3
STRONG = (10.0, 100.0, 1000.0)
GPU = "--config.model.kernels=pallas --config.compute_dtype=bfloat16"
_ARCH = {fig: ld for ld, fig in run_cells.FIGURES.items()}   # fig -> (L, d)
_ARCH["7"] = _ARCH["6"]


def _done(rows, fig, kappa2s, none: bool) -> set[int]:
  """The seeds every wanted group of `fig` has at full length under both
  readings: LocATER at `kappa2s`, and (`none`) the no-LocATER member."""
  readings = tuple(run_cells.READINGS)
  wanted = [(reading, 100.0, k) for reading in readings for k in kappa2s]
  wanted += [(reading, 0.0, 0.0) for reading in readings] if none else []
  have = {}
  for r in rows:
    if r["figure"] == fig and not r["smoke"] and (
        r["final_step"] >= run_cells.PAPER_STEPS):
      have[r["reading"], r["kappa1"], r["kappa2"]] = set(r["seeds"])
  return set.intersection(*(have.get(w, set()) for w in wanted))


def _args(base: str, missing: set[int]) -> list[str]:
  """`base` with seeds=N where the seeds 0..N-1 are missing, else one
  seed=S (none for seed 0) per missing seed."""
  if len(missing) > 1 and missing == set(range(len(missing))):
    return [_join(base, f"seeds={len(missing)}")]
  return [_join(base, f"seed={s}" if s else "") for s in sorted(missing)]


def _join(*parts: str) -> str:
  return ",".join(p for p in parts if p)


def _item(fig: str, arg: str) -> tuple[str, str, str]:
  """(figure, configs/ file, argument) of one run of figure `fig`."""
  name, parts = run_cells.config_file(fig, *_ARCH[fig])
  return fig, f"configs/{name}.py", _join(*parts, arg)


def items(rows, stripe_vs) -> list[tuple[str, list[tuple[str, str, str]]]]:
  """(what, [`_item`]) of each backlog item not done."""
  readings = tuple(run_cells.READINGS)
  seeds = set(range(SEEDS))
  out = []
  maps = {v["reading"] for v in stripe_vs if not v["kept"]
          and v.get("steps", 0) >= run_cells.PAPER_STEPS}
  if maps != set(readings):
    out.append(("Fig. 7 with the rho maps kept, both readings (the shift "
                "test needs them)", [_item("7", "both_readings")]))
  paired = _runs(rows, "6", (), seeds) + _runs(rows, "10", (1.0,), seeds)
  if paired:
    out.append((f"the no-LocATER member with {SEEDS} seeds for Fig. 6 and "
                "Fig. 10's architecture, both readings, so that the none "
                "contrast is paired", paired))
  strong = "kappa2=" + ",".join(f"{k:g}" for k in STRONG)
  missing = seeds - _done(rows, "6", STRONG, False)
  if missing:
    out.append((f"Fig. 6 with kappa2 = {', '.join(f'{k:g}' for k in STRONG)}"
                ", both readings, until tr(W_QK) reaches its target", [
                    _item("6", a) for a in _args(
                        f"{strong},both_readings", missing)]))
  listed = {c for _, cs in out for c in cs}
  more = [c for fig in ("6", "8", "9", "10", "11", "12")
          for c in _runs(rows, fig, defaults.KAPPA2_SWEEP, seeds)
          if c not in listed]
  if more:
    figs = ", ".join(dict.fromkeys(fig for fig, _, _ in more))
    out.append((f"{SEEDS} seeds for Fig{'s' * (len(more) > 1)}. {figs} "
                "(sweep and no-LocATER member, both readings)", more))
  return out


def _runs(rows, fig, kappa2s, seeds) -> list[tuple[str, str, str]]:
  """The runs that give figure `fig` `seeds` of its LocATER groups at
  `kappa2s` and of its no-LocATER member, both readings: the sweep with
  that member where the sweep lacks a seed, the member alone where only
  it does."""
  sweep = seeds - _done(rows, fig, kappa2s, False) if kappa2s else set()
  none = seeds - _done(rows, fig, (), True) - sweep
  return ([_item(fig, a) for a in _args("both_readings,contrast", sweep)]
          + [_item(fig, a) for a in _args("none", none)])


def recorded_walls(runs) -> dict:
  """(layers, d) -> [(members, wall minutes)] of its recorded full-length
  runs (`run_cells.wall_minutes`)."""
  per_dir = {}
  for r in runs:
    if not r["smoke"] and r["final_step"] >= run_cells.PAPER_STEPS:
      key = (r["path"], r.get("num_layers"), r["d_model"])
      per_dir[key] = per_dir.get(key, 0) + len(r["members"])
  out = {}
  for (path, layers, d), n in sorted(per_dir.items()):
    wall = run_cells.wall_minutes(path)
    if wall and n:
      out.setdefault((layers, d), []).append((n, wall))
  return out


def project(walls, n: int) -> float:
  """Minutes for `n` members: n x the median minutes per member of the
  recorded runs nearest to n in members (NaN without any)."""
  if not walls:
    return math.nan
  near = min(abs(m - n) for m, _ in walls)
  return n * float(np.median([w / m for m, w in walls if abs(m - n) == near]))


def command(fig: str, path: str, arg: str) -> str:
  """The launch command of one backlog run, its workdir named after it."""
  words = [f"fig{fig}"] + [
      "kappa2_" + t[len("kappa2="):] if t.startswith("kappa2=")
      else t.replace("=", "") for t in arg.split(",")
      if t and not t.startswith(("L=", "d="))]
  config = path + (f":{arg}" if arg else "")
  return (f"python launch/train.py --config {config} {GPU} --workdir "
          f"runs/{'_'.join(words)}")


def still_to_run(rows, runs, stripe_vs) -> list[str]:
  """Markdown: each backlog item in priority order, its commands and its
  projected GPU minutes."""
  walls = recorded_walls(runs)
  out, total = [], 0.0
  for i, (what, configs) in enumerate(items(rows, stripe_vs), 1):
    parts, item = [], 0.0
    for fig, path, arg in configs:
      config = args_lib.load_config_file(commands.REPO / path, arg or None)
      item += project(walls.get((config.model.num_layers,
                                 config.model.d_model)),
                      len(sweep_lib.members(config)))
      parts.append(f"`{command(fig, path, arg)}`")
    total += item
    when = (f"≈ {math.ceil(item)} GPU min" if np.isfinite(item) else
            "no recorded run of its architecture to project from")
    out.append(f"{i}. {what[0].upper()}{what[1:]} ({when}): "
               + "; ".join(parts))
  if out and np.isfinite(total):
    out.append(f"\nIn all ≈ {math.ceil(total)} GPU minutes.")
  return out
