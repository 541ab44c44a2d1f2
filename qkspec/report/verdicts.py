"""Verdicts on the paper's claims B-D (Sec. 7, Fig. 6B-D; Figs. 8-12).

Per figure and reading of kappa, two contrasts: "kappa2", kappa2 = 0 -> 1
at kappa1 = 100, the paper's claim (scale shrinks (B), entropy higher (C),
perplexity lower (D)); and "none", no LocATER -> kappa2 = 1, beyond the
paper (which compares with no LocATER only for Fig. 7's stripes: its
verdicts say higher or lower with LocATER, not "as the paper"). Each is
read at the final step (`stats`; one seed: `floors`) and, for C and D,
over the evaluations after warm-up (`over_training`).

C and D are also read as curves over kappa2 (`trends`, Fig. 6C-D): over
the LocATER groups (kappa1 = 100), the slope of the metric against log10
kappa2 over kappa2 > 0 (paired over seeds, or from one seed's scatter
about the line), and the best kappa2 > 0 against kappa2 = 0 at the
Bonferroni level for the groups it was chosen from.
"""
import numpy as np

from qkspec.report import floors
from qkspec.report import run_cells
from qkspec.report import stats as rs

# claim: (quantity, sign the paper expects for LocATER-stronger minus weaker)
CLAIMS = (("B", "scale", -1, "scale shrinks"),
          ("C", "entropy", +1, "entropy higher"),
          ("D", "valid_ppl", -1, "valid perplexity lower"))
OVER_TRAINING = {"C": "mean/entropy", "D": "valid/ppl"}
TREND_CLAIMS = (("D", "valid_ppl", -1), ("C", "entropy", +1))
PAPER = run_cells.PAPER_STEPS
TRANSFERRED = "floor transferred from Fig. 6"


def member_id(row) -> tuple:
  """Which members a group is: its figure, runs, strengths and seeds, and its
  reading unless it has no LocATER (that member trains the same under
  either reading and is one member in both cells, `run_cells.cells`)."""
  locater = row["kappa1"] > 0 or row["kappa2"] > 0
  return (row["label"], tuple(row.get("run_dirs", ())), row["kappa1"],
          row["kappa2"],
          row.get("target", 1.0), tuple(row.get("seeds", ())),
          row["reading"] if locater else None)


def judge(quantity, sign, d, m0, m1, refs, level: float = rs.LEVEL) -> dict:
  """The verdict, with its numbers, on per-seed differences `d` between
  group means `m0` -> `m1`: paired with two seeds, else the larger floor
  of `refs` (`floors.one_seed`), both at `level`."""
  minimal = rs.min_effect(quantity, m0, m1)
  out = dict(n=len(d), minimal=minimal, ci=None, floor=None, floor_ref=None,
             transferred=False)
  if len(d) >= 2:
    test = rs.paired_test(d, level)
    out.update(diff=test["mean"], ci=test["ci"], t=test["t"],
               t_crit=test["t_crit"], p=test["p"])
    significant, one_seed = test["significant"], False
  else:
    out["diff"] = float(d[0]) if len(d) else m1 - m0
    one_seed = True
    test = floors.one_seed(out["diff"], refs, m0, m1, level)
    significant = test["significant"]   # without refs: indicative only
    out.update(floor=test["floor"], p=test["p"], floor_ref=test["floor_ref"],
               transferred=any(r["transferred"] for r in refs))
  out["verdict"] = rs.decide(out["diff"], sign, minimal, significant,
                             one_seed)
  out["sign"] = sign
  return out


def _curve_of(member, key):
  steps, values = member["metrics"].get(key, ((), ()))
  return (steps, values) if len(steps) > 1 else None


def over_training(members, base, alt, claim, sign, refs) -> dict | None:
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
              alt[f"{quantity}_mean"], refs)
  out.update(start=start, evaluations=per_seed[0][2],
             same_sign=float(pos if sign > 0 else 1 - pos))
  return out


def verdicts(rows, members=None, reruns=None) -> list[dict]:
  """Claims B, C, D per figure, reading and contrast; `members`: (label,
  reading) -> the cell's counted members, for the claims over training;
  `reruns`: `floors.rerun_reference`."""
  seed_ref = floors.seed_reference(rows)
  out = []
  for (label, reading), cell in floors.by_cell(rows).items():
    for kind, base, alt in floors.contrast_pairs(cell):
      for claim, quantity, sign, what in CLAIMS:
        m0, m1 = base[f"{quantity}_mean"], alt[f"{quantity}_mean"]
        seeds, d = floors.paired_values(quantity, base, alt)
        if len(d) < 2:
          d = np.array([m1 - m0]) if np.isfinite(m1 - m0) else np.array([])
        refs = floors.references(seed_ref, reruns or {}, floors.arch(alt),
                                 reading, kind, quantity)
        v = judge(quantity, sign, d, m0, m1, refs)
        cell_members = (members or {}).get((label, reading), [])
        v.update(figure=alt["figure"], label=label, reading=reading,
                 claim=claim, what=what, kind=kind, quantity=quantity,
                 kappa1=alt["kappa1"], kappa2=alt["kappa2"],
                 base=m0, alt=m1, seeds=seeds,
                 base_id=member_id(base), alt_id=member_id(alt),
                 final_step=min(base.get("final_step", PAPER),
                                alt.get("final_step", PAPER)),
                 training=over_training(cell_members, base, alt, claim,
                                        sign, refs))
        if v["training"]:
          v["training"]["kind"] = kind
        out.append(v)
  return out


def direction(v) -> str:
  """"as the paper" / "opposite" (kappa2), "higher" / "lower with LocATER"
  (none, beyond the paper)."""
  up = np.sign(v["diff"]) > 0
  if v.get("kind") == "none":
    return f"{'higher' if up else 'lower'} with LocATER"
  return "as the paper" if np.sign(v["diff"]) == v["sign"] else "opposite"


def short(v) -> str:
  """A verdict in a table cell: yes, rev., n.s., ~0, "(yes)" and
  "(rev.)" for one seed; higher / lower for none; † where the floor is
  transferred (`floors`)."""
  verdict = v["verdict"]
  mark = "†" if v.get("transferred") and verdict != rs.NO_EFFECT else ""
  if verdict in (rs.NOT_SIGNIFICANT, rs.NO_EFFECT):
    return {rs.NOT_SIGNIFICANT: "n.s.", rs.NO_EFFECT: "~0"}[verdict] + mark
  if v.get("kind") == "none":
    word = direction(v).split()[0]
  else:
    word = "yes" if direction(v) == "as the paper" else "**rev.**"
  return (f"({word})" if verdict == rs.INDICATIVE else word) + mark


def full(v) -> str:
  """A verdict in words, with its direction when significant or
  indicative, and where its floor was transferred."""
  verdict = v["verdict"]
  if verdict == rs.INDICATIVE:
    verdict = f"{rs.INDICATIVE}, {direction(v)}"
  elif v.get("kind") == "none" and verdict in (rs.REPRODUCED, rs.REVERSED):
    verdict = direction(v)
  if v.get("transferred") and v["verdict"] != rs.NO_EFFECT:
    verdict += f"; {TRANSFERRED}"
  return verdict


def evidence(v) -> str:
  """The numbers behind a verdict: the 95% interval (seeds) or the floor
  and what it was measured on."""
  if v["ci"] is not None:
    lo, hi = v["ci"]
    return f"{v['diff']:+.3g} [{lo:+.3g}, {hi:+.3g}], {v['n']} seeds"
  if v["floor"] is not None:
    ref = v["floor_ref"]
    what = f"{ref['label']} {'rerun' if ref['source'] == 'rerun' else 'seeds'}"
    return f"{v['diff']:+.3g} vs floor {v['floor']:.2g} ({what}), 1 seed"
  return f"{v['diff']:+.3g}, 1 seed, no floor to hold it to"


def trend(rows, quantity, sign, refs=()) -> dict | None:
  """Slope per decade of kappa2 and the best kappa2 > 0 against 0 of
  `quantity` over one figure and reading's LocATER `rows`."""
  locater = sorted((r for r in rows if r["kappa1"] > 0),
                   key=lambda r: r["kappa2"])
  base = next((r for r in locater if r["kappa2"] == 0), None)
  swept = [r for r in locater if r["kappa2"] > 0]
  if base is None or len(swept) < 2:
    return None
  values = [floors.seed_values(r, quantity) for r in [base] + swept]
  seeds = sorted(set.intersection(*(set(v) for v in values)))
  if not seeds:
    return None
  x = np.log10([r["kappa2"] for r in swept])
  per_seed = [rs.slope(x, [v[s] for v in values[1:]]) for s in seeds]
  if len(seeds) >= 2:
    test = rs.paired_test([p["slope"] for p in per_seed])
    fit = dict(slope=test["mean"], ci=test["ci"], p=test["p"])
  else:
    fit = per_seed[0]
  best = (min if sign < 0 else max)(swept, key=lambda r: r[f"{quantity}_mean"])
  best_values = floors.seed_values(best, quantity)
  d = np.array([best_values[s] - values[0][s] for s in seeds])
  m0, m1 = base[f"{quantity}_mean"], best[f"{quantity}_mean"]
  level = rs.bonferroni(len(swept))
  j = judge(quantity, sign, d, m0, m1, list(refs), level)
  return dict(slope=fit["slope"], slope_ci=fit["ci"], slope_p=fit["p"],
              n=len(seeds), best_kappa2=best["kappa2"], diff=j["diff"],
              ci=j["ci"], floor=j["floor"], level=level, sign=sign,
              verdict=j["verdict"], transferred=j["transferred"],
              p=None if j["p"] is None else min(1.0, len(swept) * j["p"]))


def trends(rows, reruns=None) -> list[dict]:
  """`trend` of each of `TREND_CLAIMS` per figure and reading."""
  seed_ref = floors.seed_reference(rows)
  out = []
  for (label, reading), cell in floors.by_cell(rows).items():
    for claim, quantity, sign in TREND_CLAIMS:
      refs = floors.references(seed_ref, reruns or {},
                               floors.arch(cell[0]), reading, "kappa2",
                               quantity)
      t = trend(cell, quantity, sign, refs)
      if t:
        out.append(dict(t, label=label, reading=reading, claim=claim,
                        quantity=quantity))
  return out
