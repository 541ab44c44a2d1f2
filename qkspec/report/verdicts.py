"""Verdicts on the paper's claims B-D (Sec. 7, Fig. 6B-D; Figs. 8-12).

Per figure and reading of kappa, two contrasts: "kappa2", kappa2 = 0 -> 1
at kappa1 = 100, the paper's claim (scale shrinks (B), entropy higher (C),
perplexity lower (D)); and "none", no LocATER -> the strongest LocATER
group, beyond the paper. Each is read at the final step (`stats`)
and, for C and D, over the evaluations after warm-up (`over_training`).

C and D are also read as curves over kappa2 (`trends`, Fig. 6C-D): over
the LocATER groups (kappa1 = 100), the slope of the metric against log10
kappa2 over kappa2 > 0 (paired over seeds, or from one seed's scatter
about the line), and the best kappa2 > 0 against kappa2 = 0 at the
Bonferroni level for the groups it was chosen from.
"""
import math

import numpy as np

from qkspec.report import run_cells
from qkspec.report import stats as rs

# claim: (quantity, sign the paper expects for LocATER-stronger minus weaker)
CLAIMS = (("B", "scale", -1, "scale shrinks"),
          ("C", "entropy", +1, "entropy higher"),
          ("D", "valid_ppl", -1, "valid perplexity lower"))
OVER_TRAINING = {"C": "mean/entropy", "D": "valid/ppl"}
TREND_CLAIMS = (("D", "valid_ppl", -1), ("C", "entropy", +1))
PAPER = run_cells.PAPER_STEPS


def contrast_pairs(rows) -> list[tuple[str, dict, dict]]:
  """(kind, base row, alt row) of one figure and reading's groups."""
  out = []
  base, alt = [next((r for r in rows if r["kappa1"] > 0
                     and r["kappa2"] == k), None) for k in (0.0, 1.0)]
  if base and alt:
    out.append(("kappa2", base, alt))
  none = next((r for r in rows if r["kappa1"] == 0 and r["kappa2"] == 0),
              None)
  locater = [r for r in rows if r["kappa1"] > 0]
  if none and locater:
    out.append(("none", none, max(locater, key=lambda r: r["kappa2"])))
  return out


def _cells(rows) -> dict:
  """(label, reading) -> its rows, in the order of `rows`."""
  out = {}
  for r in rows:
    out.setdefault((r["label"], r["reading"]), []).append(r)
  return out


def _by_cell(rows) -> dict:
  return dict(sorted(_cells(rows).items(), key=run_cells.cell_order))


def seed_values(row, quantity) -> dict:
  """{seed: final value} of a quantity in a summary row."""
  return dict(zip(row.get("seeds", ()), row.get(f"{quantity}_values", ())))


def paired_values(quantity, base, alt) -> tuple[list, np.ndarray]:
  """(common seeds, per-seed alt - base) of a quantity's final values."""
  b, a = seed_values(base, quantity), seed_values(alt, quantity)
  seeds = sorted(set(a) & set(b))
  return seeds, np.array([a[s] - b[s] for s in seeds], np.float64)


def seed_reference(rows) -> dict:
  """(reading, kind, quantity) -> the seed spread one-seed cells are held to.

  From the figure with the most seeds: rel = std of the paired difference /
  mean of max(|base|, |alt|) (`paired`). A "none" contrast without two
  seeds anywhere falls back on its stronger group's sqrt(2) x std / |mean|.
  """
  out = {}
  for (label, reading), rs_ in _by_cell(rows).items():
    for kind, base, alt in contrast_pairs(rs_):
      for _, quantity, _, _ in CLAIMS:
        seeds, d = paired_values(quantity, base, alt)
        if len(d) < 2 or not np.all(np.isfinite(d)):
          continue
        level = np.mean([max(abs(base[f"{quantity}_values"][i]),
                             abs(alt[f"{quantity}_values"][i]))
                         for i in range(len(seeds))])
        ref = dict(rel=float(np.std(d, ddof=1) / level), n=len(d),
                   label=label, paired=True)
        key = (reading, kind, quantity)
        if key not in out or ref["n"] > out[key]["n"]:
          out[key] = ref
  for (label, reading), rs_ in _by_cell(rows).items():
    locater = [r for r in rs_ if r["kappa1"] > 0 and r["n_seeds"] >= 2]
    if not locater:
      continue
    alt = max(locater, key=lambda r: r["kappa2"])
    for _, quantity, _, _ in CLAIMS:
      key = (reading, "none", quantity)
      mean, std = alt[f"{quantity}_mean"], alt[f"{quantity}_std"]
      if key in out and out[key]["paired"] or not np.isfinite(std):
        continue
      ref = dict(rel=math.sqrt(2) * std / abs(mean), n=alt["n_seeds"],
                 label=label, paired=False)
      if key not in out or ref["n"] > out[key]["n"]:
        out[key] = ref
  return out


def judge(quantity, sign, d, m0, m1, ref, level: float = rs.LEVEL) -> dict:
  """The verdict, with its numbers, on per-seed differences `d` between
  group means `m0` -> `m1`: paired with two seeds, else `ref`'s floor
  (both at `level`)."""
  minimal = rs.min_effect(quantity, m0, m1)
  out = dict(n=len(d), minimal=minimal, ci=None, floor=None)
  if len(d) >= 2:
    test = rs.paired_test(d, level)
    out.update(diff=test["mean"], ci=test["ci"], t=test["t"],
               t_crit=test["t_crit"])
    significant, one_seed = test["significant"], False
  else:
    out["diff"] = float(d[0]) if len(d) else m1 - m0
    one_seed = True
    if ref:
      out["floor"] = rs.one_seed_floor(ref["rel"], ref["n"], m0, m1, level)
      significant = abs(out["diff"]) > out["floor"]
    else:
      significant = True         # nothing to hold it to: indicative only
  out["verdict"] = rs.decide(out["diff"], sign, minimal, significant,
                             one_seed)
  out["direction"] = rs.direction(out["diff"], sign)
  return out


def _curve_of(member, key):
  steps, values = member["metrics"].get(key, ((), ()))
  return (steps, values) if len(steps) > 1 else None


def over_training(members, base, alt, claim, sign, ref) -> dict | None:
  """Claim C or D after warm-up: `judge` of each seed's time-averaged
  alt - base, and the share of evaluations of the paper's sign."""
  key = OVER_TRAINING.get(claim)
  if key is None or not members:
    return None
  quantity = dict((c, q) for c, q, _, _ in CLAIMS)[claim]
  start = int(rs.WARMUP * min(base["final_step"], alt["final_step"]))

  def group(row):
    return {m["seed"]: _curve_of(m, key) for m in members
            if (m["kappa1"], m["kappa2"], m["target"])
            == (row["kappa1"], row["kappa2"], row["target"])}
  b, a = group(base), group(alt)
  per_seed = [rs.time_average(b[s], a[s], start)
              for s in sorted(set(a) & set(b)) if a[s] and b[s]]
  per_seed = [p for p in per_seed if p[2] >= 2]
  if not per_seed:
    return None
  d = np.array([p[0] for p in per_seed])
  pos = np.mean([p[1] for p in per_seed])
  out = judge(quantity, sign, d, base[f"{quantity}_mean"],
              alt[f"{quantity}_mean"], ref)
  out.update(start=start, evaluations=per_seed[0][2],
             same_sign=float(pos if sign > 0 else 1 - pos))
  return out


def verdicts(rows, members=None) -> list[dict]:
  """Claims B, C, D per figure, reading and contrast; `members`: (label,
  reading) -> the cell's counted members, for the claims over training."""
  ref = seed_reference(rows)
  out = []
  for (label, reading), rs_ in _by_cell(rows).items():
    for kind, base, alt in contrast_pairs(rs_):
      for claim, quantity, sign, what in CLAIMS:
        m0, m1 = base[f"{quantity}_mean"], alt[f"{quantity}_mean"]
        seeds, d = paired_values(quantity, base, alt)
        if len(d) < 2:
          d = np.array([m1 - m0]) if np.isfinite(m1 - m0) else np.array([])
        r = ref.get((reading, kind, quantity))
        v = judge(quantity, sign, d, m0, m1, r)
        cell_members = (members or {}).get((label, reading), [])
        v.update(figure=alt["figure"], label=label, reading=reading,
                 claim=claim, what=what, kind=kind, quantity=quantity,
                 kappa1=alt["kappa1"], kappa2=alt["kappa2"],
                 base=m0, alt=m1, seeds=seeds, reference=r,
                 final_step=min(base.get("final_step", PAPER),
                                alt.get("final_step", PAPER)),
                 training=over_training(cell_members, base, alt, claim,
                                        sign, r))
        out.append(v)
  return out


def short(v) -> str:
  """A verdict in a table cell: yes, rev., n.s., ~0, or "(yes)" and
  "(rev.)" for one seed."""
  verdict = v["verdict"]
  if verdict == rs.INDICATIVE:
    return "(yes)" if v["direction"] == "as the paper" else "(**rev.**)"
  return {rs.REPRODUCED: "yes", rs.REVERSED: "**rev.**",
          rs.NOT_SIGNIFICANT: "n.s.", rs.NO_EFFECT: "~0"}[verdict]


def full(v) -> str:
  """A verdict in words, with its direction when indicative."""
  if v["verdict"] == rs.INDICATIVE:
    return f"{rs.INDICATIVE}, {v['direction']}"
  return v["verdict"]


def evidence(v) -> str:
  """The numbers behind a verdict: the 95% interval (seeds) or the floor."""
  if v["ci"] is not None:
    lo, hi = v["ci"]
    return f"{v['diff']:+.3g} [{lo:+.3g}, {hi:+.3g}], {v['n']} seeds"
  if v["floor"] is not None:
    return f"{v['diff']:+.3g} vs floor {v['floor']:.2g}, 1 seed"
  return f"{v['diff']:+.3g}, 1 seed, no seed spread to hold it to"


def trend(rows, quantity, sign, ref=None) -> dict | None:
  """Slope per decade of kappa2 and the best kappa2 > 0 against 0 of
  `quantity` over one figure and reading's LocATER `rows`."""
  locater = sorted((r for r in rows if r["kappa1"] > 0),
                   key=lambda r: r["kappa2"])
  base = next((r for r in locater if r["kappa2"] == 0), None)
  swept = [r for r in locater if r["kappa2"] > 0]
  if base is None or len(swept) < 2:
    return None
  values = [seed_values(r, quantity) for r in [base] + swept]
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
  best_values = seed_values(best, quantity)
  d = np.array([best_values[s] - values[0][s] for s in seeds])
  m0, m1 = base[f"{quantity}_mean"], best[f"{quantity}_mean"]
  level = rs.bonferroni(len(swept))
  j = judge(quantity, sign, d, m0, m1, ref, level)
  return dict(slope=fit["slope"], slope_ci=fit["ci"], n=len(seeds),
              best_kappa2=best["kappa2"], diff=j["diff"], ci=j["ci"],
              floor=j["floor"], level=level, verdict=j["verdict"],
              direction=j["direction"])


def trends(rows) -> list[dict]:
  """`trend` of each of `TREND_CLAIMS` per figure and reading."""
  ref = seed_reference(rows)
  out = []
  for (label, reading), rs_ in _cells(rows).items():
    for claim, quantity, sign in TREND_CLAIMS:
      t = trend(rs_, quantity, sign, ref.get((reading, "kappa2", quantity)))
      if t:
        out.append(dict(t, label=label, reading=reading, claim=claim,
                        quantity=quantity))
  return out
