r"""What a one-seed verdict is held to (paper Sec. 7, Figs. 6-12).

A cell with one seed has no spread of its own. Its difference d = alt -
base is held to the larger of two floors, each t x rel x max(|base|,
|alt|) at the verdict's level:

* the seed spread (`seed_reference`): rel = std of the paired difference
  over the seeds of the figure with the most (Fig. 6: d = 128, 1 layer) /
  its level, t with n - 1 dof. A "none" contrast without no-LocATER seeds
  to pair takes sqrt(2) x the stronger group's spread, which ignores the
  positive covariance of two runs of one seed and so overstates the noise.
* the rerun noise of the cell's architecture and reading
  (`rerun_reference`; per reading, as `replicates` keeps the spread: the
  readings' W_QK sit decades apart): the same config and seed trained
  twice moves each
  member by a relative r; with the members' changes independent, a paired
  difference moves by sqrt(2) x theirs, whose relative size is

  .. math:: \mathrm{rel} = \sqrt{\tfrac1n \textstyle\sum_k r_k^2}

  over the n member pairs (t with n dof: a rerun changes nothing on
  average).

A floor of Fig. 6's seed spread on another architecture with no rerun of
its own is *transferred*: nothing measured says that architecture is as
quiet, and Fig. 10's rerun (d = 32, 6 layers) is noisier than Fig. 6's seed
spread.
"""
import math

import numpy as np

from qkspec.records import rundir
from qkspec.report import replicates
from qkspec.report import run_cells
from qkspec.report import stats as rs

QUANTITIES = (("scale", "mean/qk_scale"), ("entropy", "mean/entropy"),
              ("valid_ppl", "valid/ppl"))


def arch(row) -> tuple[int, int]:
  """(layers, d) of a summary row or run."""
  return int(row.get("num_layers") or 1), int(row.get("d_model") or 0)


def contrast_pairs(rows) -> list[tuple[str, dict, dict]]:
  """(kind, base row, alt row) of one figure and reading's groups: "kappa2"
  0 -> 1 at kappa1 > 0, and "none" no LocATER -> kappa2 = 1 (else the
  strongest)."""
  out = []
  base, alt = [next((r for r in rows if r["kappa1"] > 0
                     and r["kappa2"] == k), None) for k in (0.0, 1.0)]
  if base and alt:
    out.append(("kappa2", base, alt))
  none = next((r for r in rows if r["kappa1"] == 0 and r["kappa2"] == 0),
              None)
  locater = [r for r in rows if r["kappa1"] > 0]
  if none and locater:
    out.append(("none", none, alt or max(locater, key=lambda r: r["kappa2"])))
  return out


def seed_values(row, quantity) -> dict:
  """{seed: final value} of a quantity in a summary row."""
  return dict(zip(row.get("seeds", ()), row.get(f"{quantity}_values", ())))


def paired_values(quantity, base, alt) -> tuple[list, np.ndarray]:
  """(common seeds, per-seed alt - base) of a quantity's final values."""
  b, a = seed_values(base, quantity), seed_values(alt, quantity)
  seeds = sorted(set(a) & set(b))
  return seeds, np.array([a[s] - b[s] for s in seeds], np.float64)


def by_cell(rows) -> dict:
  """(label, reading) -> its rows, in figure order."""
  out = {}
  for r in rows:
    out.setdefault((r["label"], r["reading"]), []).append(r)
  return dict(sorted(out.items(), key=run_cells.cell_order))


def seed_reference(rows) -> dict:
  """(reading, kind, quantity) -> the seed spread one-seed cells are held
  to: dict(rel, n, dof, label, arch, paired) from the figure with the most
  seeds (see the module doc)."""
  out = {}
  for (label, reading), cell in by_cell(rows).items():
    for kind, base, alt in contrast_pairs(cell):
      for quantity, _ in QUANTITIES:
        seeds, d = paired_values(quantity, base, alt)
        if len(d) < 2 or not np.all(np.isfinite(d)):
          continue
        b, a = seed_values(base, quantity), seed_values(alt, quantity)
        level = np.mean([max(abs(b[s]), abs(a[s])) for s in seeds])
        _keep(out, (reading, kind, quantity), dict(
            rel=float(np.std(d, ddof=1) / level), n=len(d), label=label,
            arch=arch(alt), paired=True))
  for (label, reading), cell in by_cell(rows).items():
    locater = [r for r in cell if r["kappa1"] > 0 and r["n_seeds"] >= 2]
    if not locater:
      continue
    alt = max(locater, key=lambda r: r["kappa2"])
    for quantity, _ in QUANTITIES:
      key = (reading, "none", quantity)
      mean, std = alt[f"{quantity}_mean"], alt[f"{quantity}_std"]
      if key in out and out[key]["paired"] or not np.isfinite(std):
        continue
      _keep(out, key, dict(rel=math.sqrt(2) * std / abs(mean),
                           n=alt["n_seeds"], label=label, arch=arch(alt),
                           paired=False))
  return out


def _keep(out, key, ref):
  """Keeps `ref` (dof n - 1) where it has more seeds than the one held."""
  ref.update(dof=ref["n"] - 1, source="seeds")
  if key not in out or ref["n"] > out[key]["n"]:
    out[key] = ref


def rerun_reference(runs, replicate_runs) -> dict:
  """((layers, d), reading, quantity) -> the rerun noise of a paired
  difference: dict(rel, n, dof, label, arch), from the replicate members
  with a twin in `runs` (`replicates.pairs`)."""
  found = {}
  for run, m, _, twin in replicates.pairs(runs, replicate_runs):
    for quantity, key in QUANTITIES:
      a = rundir.final_value(m["metrics"], key)
      b = rundir.final_value(twin["metrics"], key)
      level = max(abs(a), abs(b))
      if np.isfinite(a - b) and level > 0:
        found.setdefault((arch(run), run["reading"], quantity, run["label"]),
                         []).append((a - b) / level)
  return {(a, reading, quantity): dict(
      rel=float(np.sqrt(np.mean(np.square(r)))), n=len(r), dof=len(r),
      label=label, arch=a, source="rerun")
          for (a, reading, quantity, label), r in sorted(found.items())}


def references(seed_ref, reruns, cell_arch, reading, kind, quantity
               ) -> list[dict]:
  """The floors a one-seed cell of `cell_arch` is held to; each marked
  `transferred` when it is a seed spread of another architecture and the
  cell's has no rerun."""
  seed = seed_ref.get((reading, kind, quantity))
  rerun = reruns.get((cell_arch, reading, quantity))
  out = [dict(r) for r in (seed, rerun) if r]
  for r in out:
    r["transferred"] = (r["source"] == "seeds" and rerun is None
                        and r["arch"] != cell_arch)
  return out


def one_seed(diff, refs, m0, m1, level: float = rs.LEVEL) -> dict:
  """The larger floor of `refs` at `level` and the test's p-value (the
  largest of the floors', which all must be passed); floor None without
  refs."""
  if not refs:
    return dict(floor=None, p=None, significant=True, floor_ref=None)
  size = max(abs(m0), abs(m1))
  floors = [rs.one_seed_floor(r["rel"], r["dof"], m0, m1, level)
            for r in refs]
  top = int(np.argmax(floors))
  p = max(rs.t_p_value(abs(diff) / (r["rel"] * size), r["dof"])
          if r["rel"] * size > 0 else (0.0 if diff else 1.0) for r in refs)
  return dict(floor=floors[top], p=p, significant=abs(diff) > floors[top],
              floor_ref=refs[top])
