"""The report's verdicts on the paper's claims (Sec. 7, Figs. 6-12).

* `verdicts(rows)` (rows: `report_runs.summarize_runs`): per figure and
  reading, the paper's claims B (scale shrinks), C (entropy higher) and D
  (perplexity lower) for kappa2 = 0 -> 1 (kappa1 > 0), and for no LocATER
  (kappa1 = kappa2 = 0) -> LocATER where a run has that member:
  "reproduced", "reversed" or "not significant" (the difference of the
  means is within 2 x the pooled std over seeds). With one seed the sign
  decides and the line says "one seed: no error bar", unless replicate runs
  (the same config and seed trained again) show a run-to-run spread in
  the same reading as large as the difference (`replicates.by_reading`):
  then it is "not significant" too.
  With two seeds or more in both groups the line adds a paired verdict
  (`paired`): a sweep's members of one seed share their initialisation and
  batches, so the per-seed differences can be consistent where the seeds'
  spread of each group's mean hides them.
* Fig. 7's heat maps get a stripe test per member (`stripes.stripe_test`: a
  persistent, salient position profile of rho_i over training; a record
  rebuilt from an earlier report keeps the result instead of the map) and
  `stripe_verdicts(runs)` a verdict line per reading: stripes with LocATER
  and none without, over every seed.
* `glance(verdicts)`: all of them as one table, a row per figure and
  reading, a column per claim and contrast, which the report puts first.
"""
import math

import numpy as np

from qkspec.experiments import replicates
from qkspec.experiments import report_runs
from qkspec.experiments import stripes
from qkspec.experiments import training_plots

# claim: (quantity, sign the paper expects for LocATER-stronger minus weaker)
CLAIMS = (("B", "scale", -1, "scale shrinks"),
          ("C", "entropy", +1, "entropy higher"),
          ("D", "valid_ppl", -1, "valid perplexity lower"))


def _pick(rows, kappa1_positive, kappa2):
  for r in rows:
    if (r["kappa1"] > 0) == kappa1_positive and r["kappa2"] == kappa2:
      return r
  return None


def _shortened(steps: int) -> str:
  """"; shortened: N of 50,000 steps" for a verdict on a shorter run."""
  return ("" if steps >= report_runs.PAPER_STEPS else
          f"; shortened: {steps:,} of {report_runs.PAPER_STEPS:,} steps")


def paired(quantity, base, alt, sign):
  """(verdict, per-seed differences) of `alt` - `base` over the seeds both
  rows hold (`seeds`, `{quantity}_values`): "reproduced" or "reversed" (by
  `sign`, the sign the paper expects) when the mean difference exceeds 2 x
  its standard error (std / sqrt(n)) and every seed's difference has its
  sign, else "not significant"; None with fewer than two common seeds."""
  b = dict(zip(base.get("seeds", ()), base.get(f"{quantity}_values", ())))
  a = dict(zip(alt.get("seeds", ()), alt.get(f"{quantity}_values", ())))
  d = np.array([a[s] - b[s] for s in sorted(set(a) & set(b))], float)
  if len(d) < 2 or not np.all(np.isfinite(d)):
    return None, d
  mean, se = d.mean(), d.std(ddof=1) / math.sqrt(len(d))
  if abs(mean) <= 2 * se or not np.all(np.sign(d) == np.sign(mean)):
    return "not significant", d
  return ("reproduced" if np.sign(mean) == sign else "reversed"), d


def _compare(claim, quantity, sign, what, base, alt, contrast, spread=None):
  """One verdict: `alt` (stronger LocATER) against `base`; its note says
  when either ran fewer than the paper's steps. With one seed, `spread`
  (reading -> `replicates.spread`, `replicates.by_reading`) makes a
  difference within the same-seed rerun spread of `alt`'s reading "not
  significant"."""
  m0, s0 = base[f"{quantity}_mean"], base[f"{quantity}_std"]
  m1, s1 = alt[f"{quantity}_mean"], alt[f"{quantity}_std"]
  diff = m1 - m0
  one_seed = min(base["n_seeds"], alt["n_seeds"]) < 2
  if not (np.isfinite(m0) and np.isfinite(m1)):
    verdict, note = "not significant", "no values"
  elif one_seed:
    verdict = ("not significant" if diff == 0 else
               "reproduced" if np.sign(diff) == sign else "reversed")
    note = "one seed: no error bar"
    rel = (spread or {}).get(alt["reading"], {}).get(quantity, {}).get("rel")
    if rel is not None:
      inside = replicates.within(diff, m0, m1, rel)
      verdict = "not significant" if inside else verdict
      note += (f"; {'within' if inside else 'beyond'} "
               f"{replicates.FACTOR:g} x the same-seed rerun spread "
               f"({rel:.2g} relative)")
  else:
    pooled = math.sqrt((s0 ** 2 + s1 ** 2) / 2)
    if abs(diff) <= 2 * pooled:
      verdict = "not significant"
    else:
      verdict = "reproduced" if np.sign(diff) == sign else "reversed"
    note = (f"|diff| {abs(diff):.4g} vs 2 x pooled std {2 * pooled:.4g}, "
            f"{min(base['n_seeds'], alt['n_seeds'])} seeds")
  by_seed, d = paired(quantity, base, alt, sign)
  if by_seed:
    same = int(np.sum(np.sign(d) == np.sign(d.mean())))
    note += (f"; paired by seed: {d.mean():+.4g} ± {d.std(ddof=1):.2g} "
             f"over {len(d)} seeds, {same} of {len(d)} of that sign: "
             f"**{by_seed}**")
  note += _shortened(min(base.get("final_step", report_runs.PAPER_STEPS),
                         alt.get("final_step", report_runs.PAPER_STEPS)))
  text = (f"{alt['label']}, {report_runs.reading_name(alt['reading'])}, "
          f"claim {claim} ({what}, {contrast}): **{verdict}**: "
          f"{plus_minus(m0, s0)} -> {plus_minus(m1, s1)} "
          f"(diff {diff:+.4g}; {note})")
  return dict(figure=alt["figure"], label=alt["label"],
              reading=alt["reading"], claim=claim, contrast=contrast,
              kappa1=alt["kappa1"], kappa2=alt["kappa2"],
              verdict=verdict, diff=diff, note=note, text=text,
              paired=by_seed)


def verdicts(rows, spread=None) -> list[dict]:
  """Claims B, C, D per figure label and reading (see module docstring;
  `spread`: reading -> `replicates.spread`, the one-seed floor)."""
  groups = {}
  for r in rows:
    groups.setdefault((r["label"], r["reading"]), []).append(r)
  out = []
  for _, rs in sorted(groups.items(), key=report_runs.cell_order):
    pairs = []
    base, alt = _pick(rs, True, 0.0), _pick(rs, True, 1.0)
    if base and alt:
      pairs.append((base, alt, "kappa2 = 0 -> 1"))
    none = next((r for r in rs if r["kappa1"] == 0 and r["kappa2"] == 0),
                None)
    locater = [r for r in rs if r["kappa1"] > 0]
    if none and locater:
      best = max(locater, key=lambda r: r["kappa2"])
      pairs.append((none, best, f"none -> kappa1 = {best['kappa1']:g}, "
                                f"kappa2 = {best['kappa2']:g}"))
    for b, a, contrast in pairs:
      out += [_compare(c, q, s, w, b, a, contrast, spread)
              for c, q, s, w in CLAIMS]
  return out


_SHORT = {"reproduced": "yes", "reversed": "**reversed**",
          "not significant": "n.s.", "not reproduced": "no"}


def glance(vs) -> list[str]:
  """The verdicts `vs` as one markdown table: a row per figure and
  reading, a column per claim and contrast (kappa2 = 0 -> 1; no LocATER
  -> LocATER); "yes" (reproduced), "**reversed**", "n.s." (not
  significant), a paired verdict that differs in brackets, "-" where the
  runs lack the pair; Fig. 7's stripe verdicts as a line below it."""
  cells, stripe = {}, []
  for v in vs:
    if v["claim"] == "stripes":
      stripe.append(f"{v['label']}, {report_runs.reading_name(v['reading'])}"
                    f" {_SHORT[v['verdict']]}")
      continue
    kind = "kappa2" if v["contrast"].startswith("kappa2") else "none"
    cell = _SHORT[v["verdict"]]
    if v.get("paired") and v["paired"] != v["verdict"]:
      cell += f" (paired: {_SHORT[v['paired']]})"
    cells.setdefault((v["label"], v["reading"]), {})[kind, v["claim"]] = cell
  claims = [c for c, _, _, _ in CLAIMS]
  lines = ["| figure | reading | " + " | ".join(
      f"{c} ({what}), {contrast}" for contrast in ("kappa2 0 -> 1",
                                                  "none -> LocATER")
      for c, _, _, what in CLAIMS) + " |",
           "|" + "---|" * (2 + 2 * len(claims))]
  for (label, reading), row in sorted(cells.items(),
                                      key=report_runs.cell_order):
    lines.append(f"| {label} | {report_runs.reading_name(reading)} | "
                 + " | ".join(row.get((kind, c), "-")
                              for kind in ("kappa2", "none")
                              for c in claims) + " |")
  if stripe:
    lines += ["", "Stripes in rho_i over training (Fig. 7: with LocATER, "
              "none without): " + "; ".join(stripe) + "."]
  return lines if cells or stripe else []


def plus_minus(mean, std):
  if not np.isfinite(mean):
    return "n/a"
  return f"{mean:.4g}" + (f" ± {std:.2g}" if np.isfinite(std) else "")


def _stripe_result(member, layer: int = 0):
  """`stripes.stripe_test` of the member's layer-`layer` rho map; else the
  result a record kept in place of the map (layer 0, members.json
  "stripes"), or None."""
  key = next((k for k in training_plots.rho_keys(layer)
              if k in member["metrics"]), None)
  if key is None or len(member["metrics"][key][0]) < 2:
    return member.get("stripes") if layer == 0 else None
  return stripes.stripe_test(member["metrics"][key][1])


def rho_stripes(members, layer: int = 0) -> list[tuple[str, dict]]:
  """(member name, `stripes.stripe_test` of its layer-`layer` rho map)."""
  names = training_plots.member_names(members)
  results = [(n, _stripe_result(m, layer)) for n, m in zip(names, members)]
  return [(n, r) for n, r in results if r is not None]


def stripe_verdicts(runs) -> list[dict]:
  """Fig. 7's claim per reading: salient stripes in rho_i over training
  with LocATER (kappa1 > 0) and none without (kappa1 = kappa2 = 0), over
  every seed of the cell: "reproduced" when every LocATER map has stripes
  and no map without it does, "reversed" for the opposite, else "not
  reproduced"."""
  out = []
  for (label, reading), rs in sorted(report_runs.cells(runs).items(),
                                     key=report_runs.cell_order):
    if rs[0]["figure"] != "7":
      continue
    found = {True: [], False: []}          # LocATER? -> [stripes?]
    counted = report_runs.cell_members(rs)[0]
    for m in counted:
      result = _stripe_result(m)
      if result is not None:
        found[m["kappa1"] > 0].append(result["stripes"])
    if not (found[True] and found[False]):
      continue
    (n1, s1), (n0, s0) = [(len(found[k]), sum(found[k]))
                          for k in (True, False)]
    verdict = ("reproduced" if s1 == n1 and s0 == 0 else
               "reversed" if s1 == 0 and s0 == n0 else "not reproduced")
    text = (f"{label}, {report_runs.reading_name(reading)}, claim stripes "
            f"(rho_i over training, none -> LocATER): **{verdict}**: "
            f"stripes in {s1} of {n1} LocATER map{'s' * (n1 > 1)} and "
            f"{s0} of {n0} without LocATER (permutation p < "
            f"{stripes.P_VALUE:g} and contrast C >= "
            f"{stripes.MIN_CONTRAST:g}"
            f"{_shortened(max(m['last_step'] for m in counted))})")
    out.append(dict(figure="7", label=label, reading=reading,
                    claim="stripes", verdict=verdict, text=text))
  return out
