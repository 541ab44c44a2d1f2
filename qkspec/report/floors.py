r"""The noise the records measure, and what a one-seed verdict is held to
(paper Sec. 7, Figs. 6-12).

A cell with one seed has no spread of its own. Its difference d = alt -
base is held to every noise the records measure for its reading of kappa
and its contrast (`candidates`), each as a floor t x rel x max(|base|,
|alt|) at the verdict's level (`one_seed`): beyond the largest it is
significant; beyond some but not the largest, *undetermined* (the records
cannot tell which noise holds on the cell's architecture); else not
significant. The noises (`Reference`):

* the seed spread (`seed_references`): rel = std of the paired difference
  over the seeds of the figure with the most (Fig. 6: d = 128, 1 layer) /
  its level, t with n - 1 dof. A "none" contrast without no-LocATER seeds
  to pair takes sqrt(2) x the LocATER group's spread (`paired` False): it
  ignores the covariance of two runs of one seed, which overstates a
  paired difference's noise, and the spread of the no-LocATER member,
  which understates it where that member varies more over seeds; it errs
  both ways, by quantity.
* the rerun noise of each architecture rerun in that reading
  (`rerun_references`; per reading, as the readings' W_QK sit decades
  apart): the same config and seed trained twice moves each member by a
  relative r; with the members' changes independent, a paired difference
  moves by sqrt(2) x theirs, whose relative size is

  .. math:: \mathrm{rel} = \sqrt{\tfrac1n \textstyle\sum_k r_k^2}

  over the n member pairs (t with n dof: a rerun changes nothing on
  average).

A cell whose architecture has no noise of its own measured (`here` False)
is held to noises measured on others only.

A replicate run repeats a run's config and seed as another program: other
members trained side by side, the code at another commit (`Rerun` says
which), so its differences hold more than XLA's nondeterminism. Its member
`pairs` give the rerun noise above and the spread the report prints, the
largest relative difference |a - b| / mean(|a|, |b|) per reading of kappa
(`by_reading`): the two readings' tr(W^T W) sit decades apart, so one's
spread is no floor for the other.
"""
import dataclasses
import math

import numpy as np

from qkspec.report import run_cells
from qkspec.report import stats as rs

QUANTITIES = ("scale", "entropy", "valid_ppl")         # one-seed floors
SPREAD = tuple(name for name, _, _ in run_cells.QUANTITIES)  # rerun spread


@dataclasses.dataclass(frozen=True)
class Reference:
  """A noise the records measure, relative to the level it moves."""
  rel: float
  n: int                     # seeds, or member pairs of a rerun
  dof: int
  label: str                 # the figure it was measured on
  arch: tuple[int, int]      # (layers, d) it was measured on
  source: str                # "seeds" or "rerun"
  paired: bool = True        # False: sqrt(2) x a group's spread


def _keep(out, key, ref: Reference):
  """Keeps `ref` where it has more seeds than the one held."""
  if key not in out or ref.n > out[key].n:
    out[key] = ref


def seed_references(cells) -> dict:
  """(reading, kind, quantity) -> the seed spread `Reference` of the
  figure with the most seeds (see the module doc), over the cells'
  `run_cells.Contrast`s."""
  out = {}
  for (label, reading), cell in cells.items():
    for c in cell.contrasts:
      for quantity in QUANTITIES:
        d = c.diffs[quantity]
        if len(d) < 2 or not np.all(np.isfinite(d)):
          continue
        b = dict(zip(c.base.seeds, c.base.values[quantity]))
        a = dict(zip(c.alt.seeds, c.alt.values[quantity]))
        level = np.mean([max(abs(b[s]), abs(a[s])) for s in c.seeds])
        _keep(out, (reading, c.kind, quantity), Reference(
            rel=float(np.std(d, ddof=1) / level), n=len(d), dof=len(d) - 1,
            label=label, arch=c.alt.arch, source="seeds"))
  for (label, reading), cell in cells.items():
    locater = [g for g in cell.groups if g.kappa1 > 0 and g.n_seeds >= 2]
    if not locater:
      continue
    alt = max(locater, key=lambda g: g.kappa2)
    for quantity in QUANTITIES:
      key = (reading, "none", quantity)
      std = alt.std[quantity]
      if key in out and out[key].paired or not np.isfinite(std):
        continue
      _keep(out, key, Reference(
          rel=math.sqrt(2) * std / abs(alt.mean[quantity]), n=alt.n_seeds,
          dof=alt.n_seeds - 1, label=label, arch=alt.arch, source="seeds",
          paired=False))
  return out


def rerun_references(pairs) -> dict:
  """((layers, d), reading, quantity) -> the rerun noise `Reference` of a
  paired difference, from the replicate members and their twins
  (`pairs`)."""
  found, labels = {}, {}
  for run, m, _, twin in pairs:
    labels.setdefault((run.arch, run.reading), set()).add(run.label)
    for quantity in QUANTITIES:
      a, b = m["final"][quantity], twin["final"][quantity]
      level = max(abs(a), abs(b))
      if np.isfinite(a - b) and level > 0:
        found.setdefault((run.arch, run.reading, quantity, run.label),
                         []).append((a - b) / level)
  for (arch, reading), names in labels.items():
    if len(names) > 1:   # one Reference per key: one would hide the other
      raise ValueError(f"reruns of {sorted(names)} share the architecture "
                       f"{arch} and the reading {reading}: their rerun "
                       "noise would be one figure's alone.")
  return {(arch, reading, quantity): Reference(
      rel=float(np.sqrt(np.mean(np.square(r)))), n=len(r), dof=len(r),
      label=label, arch=arch, source="rerun")
          for (arch, reading, quantity, label), r in sorted(found.items())}


def candidates(seed_refs, reruns) -> dict:
  """(reading, kind, quantity) -> every noise the records measure for a
  one-seed cell of that reading, contrast and quantity: the seed spread,
  then the rerun noise of each architecture rerun in that reading."""
  out = {}
  for reading, kind, quantity in sorted(
      set(seed_refs) | {(r, k, q) for (_, r, q) in reruns
                        for k in ("kappa2", "none")}):
    seed = seed_refs.get((reading, kind, quantity))
    out[reading, kind, quantity] = tuple([seed] * (seed is not None) + [
        r for (_, rr, q), r in sorted(reruns.items())
        if (rr, q) == (reading, quantity)])
  return out


@dataclasses.dataclass(frozen=True)
class Floor:
  """A one-seed difference against its floors (`one_seed`)."""
  floor: float | None        # the largest: what significance needs
  ref: Reference | None      # the largest's noise
  lowest: float | None       # the smallest
  p: float | None            # the test's p: the largest of the floors'
  outcome: str               # stats.SIGNIFICANT, BETWEEN or BELOW
  here: bool                 # a noise measured on the cell's architecture


def one_seed(diff, refs, m0, m1, arch, level: float = rs.LEVEL) -> Floor:
  """`diff` between group means `m0` -> `m1` of a cell of `arch` against
  the floors of `refs` at `level` (significant without refs)."""
  if not refs:
    return Floor(floor=None, ref=None, lowest=None, p=None,
                 outcome=rs.SIGNIFICANT, here=False)
  size = max(abs(m0), abs(m1))
  floors = [rs.one_seed_floor(r.rel, r.dof, m0, m1, level) for r in refs]
  top = int(np.argmax(floors))
  p = max(rs.t_p_value(abs(diff) / (r.rel * size), r.dof)
          if r.rel * size > 0 else (0.0 if diff else 1.0) for r in refs)
  outcome = (rs.SIGNIFICANT if abs(diff) > floors[top] else
             rs.BETWEEN if abs(diff) > min(floors) else rs.BELOW)
  return Floor(floor=floors[top], ref=refs[top], lowest=min(floors), p=p,
               outcome=outcome, here=any(r.arch == arch for r in refs))


def _key(run, member):
  return (run.label, run.reading, member["kappa1"], member["kappa2"],
          member["target"], member["seed"])


def pairs(runs, replicates) -> list[tuple]:
  """(run, member, replicate run, replicate member) of every replicate
  member with a twin in `runs` (same `_key` and last step)."""
  twins = {_key(r, m): (r, m) for r in runs for m in r.members}
  out = []
  for rep in replicates:
    for m in rep.members:
      twin = twins.get(_key(rep, m))
      if twin and twin[1]["last_step"] == m["last_step"]:
        out.append((*twin, rep, m))
  return out


def spread(found, quantities=SPREAD) -> dict:
  """name -> dict(rel: the largest relative difference, where: its pair,
  n: the pairs) of the `pairs` `found`, for each of `quantities` (the
  members' `final` values)."""
  out = {}
  for name in quantities:
    diffs = []                       # (relative difference, where)
    for run, m, rep, r in found:
      a, b = m["final"][name], r["final"][name]
      if not (np.isfinite(a) and np.isfinite(b)):
        continue
      scale = (abs(a) + abs(b)) / 2
      diffs.append((abs(a - b) / scale if scale else 0.0,
                    f"`{run.run_dir}` vs `{rep.run_dir}`, kappa1 = "
                    f"{m['kappa1']:g}, kappa2 = {m['kappa2']:g}, seed "
                    f"{m['seed']}"))
    if diffs:
      rel, where = max(diffs, key=lambda x: x[0])   # the first of a tie
      out[name] = dict(rel=rel, where=where, n=len(diffs))
  return out


def merge(*spreads: dict) -> dict:
  """`spread` dicts of disjoint pairs as one: per quantity the largest
  `rel` (with its `where`) and the pairs counted over all of them."""
  out = {}
  for s in spreads:
    for name, x in s.items():
      n = x["n"] + out.get(name, {}).get("n", 0)
      if name not in out or x["rel"] > out[name]["rel"]:
        out[name] = dict(x)
      out[name]["n"] = n
  return out


def by_reading(found, kept=()) -> dict:
  """reading -> the `spread` of its `pairs` `found`, merged with the
  spreads records `kept` without their members ((reading, run directory,
  spread) each)."""
  readings = sorted({run.reading for run, *_ in found}
                    | {reading for reading, _, _ in kept})
  out = {}
  for reading in readings:
    s = merge(spread([p for p in found if p[0].reading == reading]),
              *(s for r, _, s in kept if r == reading))
    if s:
      out[reading] = s
  return out


@dataclasses.dataclass(frozen=True)
class Rerun:
  """A replicate run against its twin: two programs of one config and
  seed."""
  reading: str
  replicate: str                 # its run directory
  pairs: int                     # members with a twin
  twin: str | None = None        # None: a spread kept without members
  members: tuple = (None, None)  # trained side by side: replicate, twin
  commits: tuple = (None, None)  # (replicate's, twin's), None unrecorded
  one_way: tuple[str, ...] = ()  # quantities whose pairs all moved one way


def reruns(runs, found, kept=()) -> tuple[Rerun, ...]:
  """What each replicate of the `pairs` `found` compares, per reading,
  then the spreads `kept` alone (`by_reading`); `runs`: every run and
  replicate run (their members count)."""
  sizes = {}
  for run in runs:
    sizes[run.run_dir] = sizes.get(run.run_dir, 0) + len(run.members)
  by_pair = {}
  for run, m, rep, r in found:
    by_pair.setdefault((run.reading, rep.run_dir, run.run_dir),
                       (rep, run, []))[2].append((m, r))
  out = []
  for (reading, _, _), (rep, run, ms) in by_pair.items():
    signs = {name: {np.sign(r["final"][name] - m["final"][name])
                    for m, r in ms} for name in SPREAD}
    out.append(Rerun(
        reading=reading, replicate=rep.run_dir, twin=run.run_dir,
        pairs=len(ms), members=(sizes[rep.run_dir], sizes[run.run_dir]),
        commits=(rep.commit, run.commit),
        one_way=tuple(n for n, s in signs.items()
                      if len(ms) > 2 and len(s) == 1 and 0 not in s)))
  out += [Rerun(reading=reading, replicate=run_dir,
                pairs=max(x["n"] for x in s.values()))
          for reading, run_dir, s in kept]
  return tuple(out)
