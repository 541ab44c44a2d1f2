"""REPRODUCTION.md's first screen and verdict tables (Sec. 7, Figs. 6-12).

`answer` says in words what the verdicts add up to, one line per claim;
`verdict_table` gives one row per figure and reading; `rules` and
`detail_table` give every verdict's numbers once.
"""
import numpy as np

from qkspec.report import run_cells
from qkspec.report import stats as rs
from qkspec.report import verdicts as rv

_UNITS = {"scale": "", "entropy": " nats", "valid_ppl": " ppl"}
_NAMES = {"B": "Scale", "C": "Entropy", "D": "Perplexity"}
_ORDER = ("yes", "(yes)", "**rev.**", "(**rev.**)", "n.s.", "~0")
_WORDS = {"yes": "as the paper", "(yes)": "as the paper with one seed",
          "**rev.**": "reversed", "(**rev.**)": "reversed with one seed",
          "n.s.": "not significant", "~0": "no practical effect"}


def _counts(vs) -> str:
  """"reversed in 9, no practical effect in 5" over the verdicts `vs`."""
  shorts = [rv.short(v) for v in vs]
  return ", ".join(f"{_WORDS[s]} in {shorts.count(s)}" for s in _ORDER
                   if s in shorts)


_MEANING = {k: w.removesuffix(" with one seed") for k, w in _WORDS.items()}


def _headline(vs) -> str:
  """The commonest outcome: "reversed in 8 of 12 cells"."""
  meanings = [_MEANING[rv.short(v)] for v in vs]
  top = max(dict.fromkeys(meanings), key=meanings.count)
  return f"{top} in {meanings.count(top)} of {len(vs)} cells"


def _range(vs) -> str:
  """The span of the differences (perplexity also relative)."""
  def span(xs, fmt):
    lo, hi = format(min(xs), fmt), format(max(xs), fmt)
    return lo if lo == hi else f"{lo} to {hi}"
  out = (span([v["diff"] for v in vs], "+.3g")
         + _UNITS.get(vs[0]["quantity"], ""))
  if vs[0]["quantity"] == "valid_ppl":
    out += f" ({span([v['diff'] / v['base'] for v in vs], '+.2%')})"
  return out


def _claim_line(vs, claim, what, kind) -> str:
  mine = [v for v in vs if v["claim"] == claim and v["kind"] == kind]
  if not mine:
    return ""
  head = (f"**{_NAMES[claim]} ({claim}, {what}): {_headline(mine)}.**"
          if kind == "kappa2" else
          f"**{_NAMES[claim]}: {_headline(mine)}.**")
  line = (f"- {head} By cell: {_counts(mine)}; difference at the last "
          f"step {_range(mine)}.")
  at = sum(bool(v.get("at_minimum")) for v in mine)
  if claim == "B" and kind == "kappa2" and at:
    line += (f" In {at} the kappa2 = 1 group sits at LocATER's own "
             "minimum W* = cI, whose scale grows with kappa2.")
  over = [dict(v["training"], quantity=v["quantity"]) for v in mine
          if v.get("training")]
  if over:
    share = [t["same_sign"] for t in over]
    span = (f"{min(share):.0%}" if min(share) == max(share) else
            f"{min(share):.0%} to {max(share):.0%}")
    line += (f" Over training (after the first {rs.WARMUP:.0%} of steps), "
             f"{len(over)} cells with curves: {_counts(over)}; the "
             f"paper's sign at {span} of evaluations.")
  return line


def _stripe_line(stripe_vs) -> str:
  if not stripe_vs:
    return ""
  verdicts = sorted({v["verdict"] for v in stripe_vs})
  kept = any(v["kept"] for v in stripe_vs)
  earlier = any(v["earlier"] for v in stripe_vs)
  return ("- **Stripes in rho_i (Fig. 7): " + " / ".join(verdicts) + ".** "
          + " ".join(v["summary"] for v in stripe_vs)
          + (" The rho maps are not in the records (only the test's "
             "results, as an earlier report printed them): the maps and "
             "this verdict cannot be redrawn from them" if kept else "")
          + (", and the test (the spread of the time-averaged profile) "
             "also counts a smooth gradient over positions as stripes"
             if kept and earlier else "") + ("." if kept else ""))


def _curve_note(trends, claim) -> str:
  """Best kappa2 > 0 against kappa2 = 0 over the cells, in words."""
  mine = [t for t in trends if t["claim"] == claim]
  if not mine:
    return ""
  slopes = [t["slope"] for t in mine]
  return (f" The best kappa2 > 0 against 0 (Bonferroni): "
          f"{_counts(mine)}; slope {min(slopes):+.3g} to "
          f"{max(slopes):+.3g}{_UNITS[mine[0]['quantity']]} per decade.")


def answer(vs, stripe_vs, trends=()) -> list[str]:
  """The paper's claims in words (with `verdicts.trends`), then
  LocATER vs none."""
  paper = [_claim_line(vs, c, w, "kappa2") + _curve_note(trends, c)
           for c, _, _, w in rv.CLAIMS]
  paper.append(_stripe_line(stripe_vs))
  none = [_claim_line(vs, c, w, "none") for c, _, _, w in rv.CLAIMS]
  out = ["The paper's claims, kappa2 = 0 -> 1 at kappa1 = 100 (Figs. 6, "
         "8-12; stripes: Fig. 7), one cell per figure and reading of kappa:",
         ""]
  out += [x for x in paper if x]
  if any(none):
    alt = next(v for v in vs if v["kind"] == "none")
    out += ["", f"Beyond the paper: no LocATER -> LocATER (kappa1 = "
            f"{alt['kappa1']:g}, kappa2 = {alt['kappa2']:g}):", ""]
    out += [x for x in none if x]
  return out


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
          "seed beyond the seed-spread floor (indicative); n.s.: not "
          "significant; ~0: below the minimal effect; -: not run. B-D and "
          "their over-training columns: kappa2 0 -> 1 (the paper's claim); "
          "none: no LocATER -> LocATER (beyond the paper).")


def rules(ref) -> list[str]:
  """How a verdict is reached, with `verdicts.seed_reference`."""
  mins = ", ".join(
      f"{q} {size:.1%} of the larger mean" if kind == "relative"
      else f"{q} {size:g}{_UNITS[q]}"
      for q, (kind, size) in rs.MIN_EFFECT.items() if q in _UNITS)
  out = [
      "Each claim is the difference alt - base between members of one "
      "seed (same initialisation and batches). Its verdict, in order: "
      f"(1) |mean difference| below the minimal effect ({mins}) is *no "
      "practical effect*; (2) with two seeds or more, a paired t-test: "
      "significant when the 95% interval mean +- t_{n-1} s / sqrt(n) "
      f"excludes 0 (t_2 = {rs.t_critical(2):.2f}, t_3 = "
      f"{rs.t_critical(3):.2f}); (3) with one seed, significant when "
      "|difference| exceeds the floor t_{n-1} x rel x max(|base|, |alt|), "
      "rel the seed spread of the same contrast and reading measured on "
      "a figure with n seeds (below), and then only *indicative (one "
      "seed)*. C and D are also judged over training: per seed the "
      "difference averaged over the evaluations after the first "
      f"{rs.WARMUP:.0%} of steps, by the same rules, beside the share of "
      "evaluations with the paper's sign.", "",
      "| reading | contrast | quantity | rel (seed spread) | measured on |",
      "|---|---|---|---|---|"]
  for (reading, kind, quantity), r in sorted(ref.items()):
    how = (f"{r['label']}, paired difference over {r['n']} seeds"
           if r["paired"] else
           f"{r['label']}: no no-LocATER seeds to pair; sqrt(2) x the "
           f"stronger group's spread over {r['n']} seeds")
    out.append(f"| {run_cells.reading_name(reading)} | {kind} | "
               f"{quantity} | {r['rel']:.2g} | {how} |")
  return out


def detail_table(vs) -> list[str]:
  """Every verdict once, with its numbers."""
  lines = ["| figure | reading | contrast | claim | base -> alt | "
           "difference, 95% CI or floor | verdict | over training |",
           "|" + "---|" * 8]
  for v in vs:
    t = v.get("training")
    over = "-" if not t else (
        f"{rv.full(t)}: {rv.evidence(t)}; {t['same_sign']:.0%} of "
        f"{t['evaluations']} evaluations as the paper")
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
                 f"| {rv.full(t)} |")
  return lines
