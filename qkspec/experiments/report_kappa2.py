"""Claims C and D as curves over kappa2 (paper Fig. 6C-D, Figs. 8-12).

Per figure and reading, over the LocATER groups (kappa1 = 100): the slope
of the metric against log10 kappa2 over kappa2 > 0 (paired over seeds, or
from one seed's scatter about the line), and the best kappa2 > 0 against
kappa2 = 0 at the Bonferroni level for the groups it was chosen from.
"""
import math

import numpy as np

from qkspec.experiments import report_stats as rs
from qkspec.experiments import report_verdicts as rv

QUANTITIES = (("D", "valid_ppl", -1), ("C", "entropy", +1))


def trend(rows, quantity, sign, ref=None) -> dict | None:
  """Slope per decade of kappa2 and the best kappa2 > 0 against 0 of
  `quantity` over one figure and reading's LocATER `rows`."""
  locater = sorted((r for r in rows if r["kappa1"] > 0),
                   key=lambda r: r["kappa2"])
  base = next((r for r in locater if r["kappa2"] == 0), None)
  swept = [r for r in locater if r["kappa2"] > 0]
  if base is None or len(swept) < 2:
    return None
  values = [rv.seed_values(r, quantity) for r in [base] + swept]
  seeds = sorted(set.intersection(*(set(v) for v in values)))
  if not seeds:
    return None
  x = np.log10([r["kappa2"] for r in swept])
  per_seed = [rs.slope(x, [v[s] for v in values[1:]]) for s in seeds]
  if len(seeds) >= 2:
    test = rs.paired_test([p["slope"] for p in per_seed])
    fit = dict(slope=test["mean"], ci=test["ci"])
  else:
    fit = per_seed[0]
  best = (min if sign < 0 else max)(swept, key=lambda r: r[f"{quantity}_mean"])
  best_values = rv.seed_values(best, quantity)
  d = np.array([best_values[s] - values[0][s] for s in seeds])
  m0, m1 = base[f"{quantity}_mean"], best[f"{quantity}_mean"]
  level = rs.bonferroni(len(swept))
  minimal = rs.min_effect(quantity, m0, m1)
  if len(d) >= 2:
    mean, std = float(d.mean()), float(d.std(ddof=1))
    half = rs.t_critical(len(d) - 1, level) * std / math.sqrt(len(d))
    ci, floor, significant = (mean - half, mean + half), None, abs(mean) > half
  else:
    mean, ci = float(d[0]), None
    floor = (rs.t_critical(ref["n"] - 1, level) * ref["rel"]
             * max(abs(m0), abs(m1))) if ref else None
    significant = floor is None or abs(mean) > floor
  verdict = rs.decide(mean, sign, minimal, significant, len(d) < 2)
  return dict(slope=fit["slope"], slope_ci=fit["ci"], n=len(seeds),
              best_kappa2=best["kappa2"], diff=mean, ci=ci, floor=floor,
              level=level, verdict=verdict,
              direction=rs.direction(mean, sign))


def trends(rows) -> list[dict]:
  """`trend` of each of `QUANTITIES` per figure and reading."""
  ref = rv.seed_reference(rows)
  cells = {}
  for r in rows:
    cells.setdefault((r["label"], r["reading"]), []).append(r)
  out = []
  for (label, reading), rs_ in cells.items():
    for claim, quantity, sign in QUANTITIES:
      t = trend(rs_, quantity, sign, ref.get((reading, "kappa2", quantity)))
      if t:
        out.append(dict(t, label=label, reading=reading, claim=claim,
                        quantity=quantity))
  return out
