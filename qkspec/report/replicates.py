"""Run-to-run spread: the same run (config, seed) trained twice.

Two GPU runs of one config and seed differ (XLA's GPU scatter-adds and some
reductions sum in another order). The spread, the largest relative
difference |a - b| / mean(|a|, |b|) over replicate pairs, is kept per
reading of kappa (`by_reading`): the two readings' tr(W^T W) sit decades
apart, so one's spread is no floor for the other.
"""
import numpy as np

from qkspec.records import rundir


def _key(run, member):
  return (run["label"], run["reading"], member["kappa1"], member["kappa2"],
          member["target"], member["seed"])


def pairs(runs, replicates) -> list[tuple[dict, dict, dict, dict]]:
  """(run, member, replicate run, replicate member) of every replicate
  member with a twin in `runs` (same `_key` and last step)."""
  twins = {_key(r, m): (r, m) for r in runs for m in r["members"]}
  out = []
  for rep in replicates:
    for m in rep["members"]:
      twin = twins.get(_key(rep, m))
      if twin and twin[1]["last_step"] == m["last_step"]:
        out.append((*twin, rep, m))
  return out


def spread(runs, replicates, quantities) -> dict:
  """name -> dict(rel: the largest relative difference, where: its pair,
  n: the pairs) for each (name, metric key) of `quantities`."""
  twins = pairs(runs, replicates)
  out = {}
  for name, key in quantities:
    found = []                       # (relative difference, where)
    for run, m, rep, r in twins:
      a = rundir.final_value(m["metrics"], key)
      b = rundir.final_value(r["metrics"], key)
      if not (np.isfinite(a) and np.isfinite(b)):
        continue
      scale = (abs(a) + abs(b)) / 2
      found.append((abs(a - b) / scale if scale else 0.0,
                    f"`{run['run_dir']}` vs `{rep['run_dir']}`, kappa1 = "
                    f"{m['kappa1']:g}, kappa2 = {m['kappa2']:g}, seed "
                    f"{m['seed']}"))
    if found:
      rel, where = max(found, key=lambda x: x[0])   # the first of a tie
      out[name] = dict(rel=rel, where=where, n=len(found))
  return out


def by_reading(runs, replicates, quantities, readings=(),
               kept=()) -> dict:
  """reading -> `spread` of its replicate runs, merged with `kept` (spreads
  kept by records without members, for every reading)."""
  out = {}
  for reading in sorted({r["reading"] for r in replicates} | set(readings)):
    s = merge(spread(runs, [r for r in replicates if r["reading"] == reading],
                     quantities), *kept)
    if s:
      out[reading] = s
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


def markdown(spreads: dict, labels: dict, name: str = "") -> str:
  """One report line for the spreads of a reading `name` (`labels`:
  quantity -> its title); where each largest one was: summary.json."""
  if not spreads:
    return "- no replicate runs given (`launch/report.py --replicates`)."
  n = max(s["n"] for s in spreads.values())
  return (f"- {name}: " + ", ".join(
      f"{labels.get(q, q)} {s['rel']:.2g}" for q, s in spreads.items())
          + f" (largest relative difference of {n} pair{'s' * (n > 1)})")
