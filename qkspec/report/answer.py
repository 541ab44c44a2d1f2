"""REPRODUCTION.md's first screen and verdict tables (Sec. 7, Figs. 6-12).

`answer` says in words what the verdicts add up to, one line per claim:
the cells' directions pooled (`pooled`), then each cell's verdict, a
one-seed verdict always "indicative (one seed)" and the cells held to a
floor transferred from Fig. 6 counted apart; `verdict_table` gives one row
per figure and reading; `detail_table` and `kappa2_table` every verdict's
numbers once.
"""
import numpy as np

from qkspec.records import rundir
from qkspec.report import run_cells
from qkspec.report import stats as rs
from qkspec.report import verdicts as rv

UNITS = {"scale": "", "entropy": " nats", "valid_ppl": " ppl"}
_NAMES = {"B": "Scale", "C": "Entropy", "D": "Perplexity"}
_RANK = {rs.REPRODUCED: 0, rs.REVERSED: 0, rs.INDICATIVE: 1,
         rs.NOT_SIGNIFICANT: 2, rs.NO_EFFECT: 3}


def _category(v) -> str:
  """"reversed", "indicative (one seed), as the paper", "higher with
  LocATER", "not significant", ... (no transfer mark)."""
  if v["verdict"] in (rs.NOT_SIGNIFICANT, rs.NO_EFFECT):
    return v["verdict"]
  word = {"opposite": "reversed"}.get(rv.direction(v), rv.direction(v))
  return f"{rs.INDICATIVE}, {word}" if v["verdict"] == rs.INDICATIVE else word


def counts(vs) -> str:
  """"reversed in 1; indicative (one seed), reversed in 7 (5 on a floor
  transferred from Fig. 6); no practical effect in 4" over `vs`."""
  groups = {}
  for v in sorted(vs, key=lambda v: (_RANK[v["verdict"]], _category(v))):
    groups.setdefault(_category(v), []).append(v)
  out = []
  for name, g in groups.items():
    moved = sum(bool(v.get("transferred")) for v in g)
    out.append(f"{name} in {len(g)}" + (
        f" ({moved} on a {rv.TRANSFERRED})" if moved and
        g[0]["verdict"] != rs.NO_EFFECT else ""))
  return "; ".join(out)


def _way(t, toward: bool) -> str:
  """The words for one direction of a pooled test."""
  if t["kind"] == "none":
    up = (t["sign"] > 0) == toward
    return f"{'higher' if up else 'lower'} with LocATER"
  return "as the paper" if toward else "against the paper"


def _pooled(t, unit_words="") -> str:
  """"against the paper in 12 of 12 cells (sign test p = 0.00049; ...)"."""
  units = ("" if t["units"] == t["cells"] else
           f"over the {t['units']} {unit_words or 'independent units'}: ")
  holm = (f"holds after Holm over the report's {t['family']} tests"
          if t["holds"] else f"not after Holm over the report's "
          f"{t['family']} tests, adjusted p = {t['holm']:.2g}")
  return (f"{_ways(t)} (sign test {units}p = {t['p']:.2g}; {holm})")


def _ways(t) -> str:
  """"against the paper in 9 of 12 cells", or both ways where tied."""
  if t["toward"] == t["against"]:
    return (f"{t['toward']} of {_n(t['cells'], 'cell')} each way"
            if t["toward"] else
            f"no difference of either sign in {_n(t['cells'], 'cell')}")
  toward = t["toward"] > t["against"]
  k = t["toward"] if toward else t["against"]
  return f"{_way(t, toward)} in {k} of {_n(t['cells'], 'cell')}"


def _per_reading(tests) -> str:
  """"literal: against the paper in 6 of 6 cells (p = 0.031), ..."."""
  return ", ".join(
      f"{rundir.READING_NAMES[t['reading']]}: {_ways(t)} (p = {t['p']:.2g}"
      + ("; holds after Holm" if t["holds"] else "") + ")" for t in tests)


def _range(vs) -> str:
  """The span of the differences (perplexity also relative)."""
  out = (rs.span([v["diff"] for v in vs], "+.3g")
         + UNITS.get(vs[0]["quantity"], ""))
  if vs[0]["quantity"] == "valid_ppl":
    out += f" ({rs.span([v['diff'] / v['base'] for v in vs], '+.2%')})"
  return out


def _over_training(mine) -> str:
  over = [dict(v["training"], quantity=v["quantity"]) for v in mine
          if v.get("training")]
  if not over:
    return ""
  share = [t["same_sign"] for t in over]
  span = (f"{min(share):.0%}" if min(share) == max(share) else
          f"{min(share):.0%} to {max(share):.0%}")
  sign = ("the paper's sign" if mine[0]["kind"] == "kappa2" else
          f"LocATER {'higher' if mine[0]['sign'] > 0 else 'lower'}")
  return (f" Over training (after the first {rs.WARMUP:.0%} of steps), "
          f"{len(over)} cells with curves: {counts(over)}; {sign} at "
          f"{span} of evaluations.")


def _claim_line(vs, tests, claim, what, kind) -> str:
  mine = [v for v in vs if v["claim"] == claim and v["kind"] == kind]
  mine_tests = [t for t in tests if (t["claim"], t["kind"]) == (claim, kind)]
  if not mine or not mine_tests:
    return ""
  both, *readings = mine_tests
  name = (f"{_NAMES[claim]} ({claim}, {what})" if kind == "kappa2"
          else _NAMES[claim])
  units = "" if kind == "kappa2" else "no-LocATER runs"
  line = (f"- **{name}: {_pooled(both, units)}.** "
          + (f"{_per_reading(readings)}. " if len(readings) > 1 else "")
          + f"By cell: {counts(mine)}; difference at the last step "
          f"{_range(mine)}.")
  at = sum(bool(v.get("at_minimum")) for v in mine)
  if claim == "B" and kind == "kappa2" and at:
    line += (f" In {at} the kappa2 = 1 group sits at LocATER's own "
             "minimum W* = cI, whose scale grows with kappa2.")
  return line + _over_training(mine)


def _stripe_line(stripe_vs) -> str:
  """Fig. 7's verdict, the test it rests on, and what that test lacks."""
  if not stripe_vs:
    return ""
  verdicts = " / ".join(sorted({v["verdict"] for v in stripe_vs}))
  earlier = any(v["earlier"] for v in stripe_vs)
  line = (f"- **Stripes in rho_i (Fig. 7): {verdicts}, by the "
          + ("superseded test" if earlier else
             "shift test (qkspec/report/stripes.py)") + ".** "
          + " ".join(v["summary"] for v in stripe_vs))
  if earlier:
    return line + (
        " That test (the spread of the time-averaged profile) also counts "
        "a smooth gradient over positions as stripes; the records keep its "
        "results, not the rho maps, so the shift test that replaces it "
        "(qkspec/report/stripes.py) needs the rerun listed first under "
        "\"Still to run\".")
  if any(v["kept"] for v in stripe_vs):
    return line + (" The rho maps are not in the records (only the test's "
                   "results): the maps and this verdict cannot be redrawn "
                   "from them.")
  return line


def _curve_note(trends, claim) -> str:
  """Best kappa2 > 0 against kappa2 = 0 over the cells, in words."""
  mine = [dict(t, kind="kappa2") for t in trends if t["claim"] == claim]
  if not mine:
    return ""
  slopes = [t["slope"] for t in mine]
  return (f" The best kappa2 > 0 against 0 (Bonferroni): "
          f"{counts(mine)}; slope {min(slopes):+.3g} to "
          f"{max(slopes):+.3g}{UNITS[mine[0]['quantity']]} per decade.")


def answer(vs, stripe_vs, trends=(), tests=()) -> list[str]:
  """The paper's claims in words (with `verdicts.trends` and the pooled
  `tests`), then LocATER vs none."""
  paper = [_claim_line(vs, tests, c, w, "kappa2") + _curve_note(trends, c)
           for c, _, _, w in rv.CLAIMS]
  paper.append(_stripe_line(stripe_vs))
  none = [_claim_line(vs, tests, c, w, "none") for c, _, _, w in rv.CLAIMS]
  out = ["The paper's claims, kappa2 = 0 -> 1 at kappa1 = 100 (Figs. 6, "
         "8-12; stripes: Fig. 7), one cell per figure and reading of kappa. "
         "Per claim: the cells' directions (the sign of each difference, "
         "significant or not) pooled by a sign test; then each cell's "
         "verdict:", ""]
  out += [x for x in paper if x]
  if any(none):
    mine = [v for v in vs if v["kind"] == "none"]
    runs = len({v["base_id"] for v in mine})
    one = all(v["n"] == 1 for v in mine)
    out += ["", f"Beyond the paper (it compares with no LocATER only for "
            f"Fig. 7's stripes): no LocATER -> LocATER (kappa1 = "
            f"{mine[0]['kappa1']:g}, kappa2 = {mine[0]['kappa2']:g}), "
            f"{_n(len(mine) // len(rv.CLAIMS), 'cell')} on "
            f"{_n(runs, 'no-LocATER run')}" + (", one seed each" if one else "")
            + ":", ""]
    out += [x for x in none if x]
  return out


def _n(k: int, what: str) -> str:
  return f"{k} {what}{'s' * (k != 1)}"


def verdict_table(vs) -> list[str]:
  """One row per figure and reading: B-D (C, D also over training) for
  kappa2 0 -> 1, and B-D for none -> LocATER."""
  cells = {}
  for v in vs:
    cells.setdefault((v["label"], v["reading"]), {})[v["kind"], v["claim"]] = v
  head = ["figure", "reading", "seeds", "B", "C", "D", "C over training",
          "D over training", "none: B", "none: C", "none: D"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for (label, reading), row in sorted(cells.items(),
                                      key=run_cells.cell_order):
    def cell(kind, claim, over=False, row=row):
      v = row.get((kind, claim))
      if over and v:
        v = v.get("training")      # C, D over training
      return rv.short(v) if v else "-"
    seeds = max(v["n"] for v in row.values())
    lines.append("| " + " | ".join(
        [label, run_cells.reading_name(reading), str(seeds)]
        + [cell("kappa2", c) for c in "BCD"]
        + [cell("kappa2", c, True) for c in "CD"]
        + [cell("none", c) for c in "BCD"]) + " |")
  return lines


def legend() -> str:
  return ("yes / **rev.**: significant at 95% (paired t-test over seeds) "
          "in the paper's direction / against it; (yes) / (**rev.**): one "
          "seed beyond its floor (indicative); †: that floor transferred "
          "from Fig. 6 (no rerun of the cell's architecture and reading); "
          "n.s.: not significant; ~0: below the minimal effect; -: not run. "
          "B-D and their over-training columns: kappa2 0 -> 1 (the paper's "
          "claim); none: no LocATER -> LocATER (beyond the paper), higher or "
          "lower with LocATER.")


def detail_table(vs) -> list[str]:
  """Every verdict once, with its numbers."""
  lines = ["| figure | reading | contrast | claim | base -> alt | "
           "difference, 95% CI or floor | verdict | over training |",
           "|" + "---|" * 8]
  for v in vs:
    t = v.get("training")
    sign = ("as the paper" if v["kind"] == "kappa2" else
            f"LocATER {'higher' if v['sign'] > 0 else 'lower'}")
    over = "-" if not t else (
        f"{rv.full(t)}: {rv.evidence(t)}; {t['same_sign']:.0%} of "
        f"{t['evaluations']} evaluations {sign}")
    short = ("" if v["final_step"] >= run_cells.PAPER_STEPS else
             f" (shortened: {v['final_step']:,} of "
             f"{run_cells.PAPER_STEPS:,} steps)")
    lines.append(
        f"| {v['label']} | {run_cells.reading_name(v['reading'])} | "
        f"{v['kind']} | {v['claim']} | {_num(v['base'])} -> "
        f"{_num(v['alt'])} | {rv.evidence(v)} | {rv.full(v)}{short} | "
        f"{over} |")
  return lines


def _num(x) -> str:
  return f"{x:.4g}" if np.isfinite(x) else "n/a"


def kappa2_table(trends) -> list[str]:
  """`verdicts.trends` as one table: a row per figure, reading, claim."""
  lines = ["| figure | reading | claim | slope per decade of kappa2, 95% CI "
           "| best kappa2 > 0 | best - kappa2 = 0, CI or floor | verdict |",
           "|" + "---|" * 7]
  for t in sorted(trends, key=lambda t: (run_cells.label_order(t["label"]),
                                         t["reading"], t["claim"])):
    ci = ("" if t["slope_ci"] is None else
          f" [{t['slope_ci'][0]:+.3g}, {t['slope_ci'][1]:+.3g}]")
    diff = f"{t['diff']:+.3g}" + (
        f" [{t['ci'][0]:+.3g}, {t['ci'][1]:+.3g}]" if t["ci"] else
        f" vs floor {t['floor']:.2g}" if t["floor"] is not None else "")
    lines.append(f"| {t['label']} | {run_cells.reading_name(t['reading'])}"
                 f" | {t['claim']} | {t['slope']:+.3g}{ci}, {t['n']} "
                 f"seed{'s' * (t['n'] > 1)} | {t['best_kappa2']:g} | {diff} "
                 f"| {rv.full(dict(t, kind='kappa2'))} |")
  return lines
