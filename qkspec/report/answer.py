"""REPRODUCTION.md's first screen and verdict tables (Sec. 7, Figs. 6-12).

`answer` says in words what the `evidence.Evidence` adds up to, one line
per claim: the cells' directions pooled in independent units (`pooled`)
with the family each is held to, then each cell's verdict, a one-seed
verdict "indicative (one seed)" or "undetermined" and the cells held to
other architectures' noise counted apart; `verdict_table` gives one row
per figure and reading; `detail_table` and `kappa2_table` every verdict's
numbers once. `short`, `full` and `evidence` put one `verdicts.Test` in
words.
"""
import numpy as np

from qkspec.records import rundir
from qkspec.report import run_cells
from qkspec.report import stats as rs

UNITS = {"scale": "", "entropy": " nats", "valid_ppl": " ppl"}
_NAMES = {"B": "Scale", "C": "Entropy", "D": "Perplexity"}
_RANK = {rs.REPRODUCED: 0, rs.REVERSED: 0, rs.INDICATIVE: 1,
         rs.UNDETERMINED: 2, rs.NOT_SIGNIFICANT: 3, rs.NO_EFFECT: 4}
ELSEWHERE = "held to other architectures' noise"       # the † mark
SQRT2 = "sqrt(2) rule"                                  # the ‡ mark


def direction(test, kind: str) -> str:
  """"as the paper" / "opposite" (kappa2), "higher" / "lower with LocATER"
  (none, beyond the paper)."""
  if kind == "none":
    return f"{'higher' if test.diff > 0 else 'lower'} with LocATER"
  return "as the paper" if np.sign(test.diff) == test.sign else "opposite"


def _elsewhere(test) -> bool:
  """One seed, no noise measured on its architecture, and judged."""
  return (test.n < 2 and not test.here and test.floor is not None
          and test.verdict != rs.NO_EFFECT)


def short(test, kind: str) -> str:
  """A verdict in a table cell: yes, rev., undet., n.s., ~0, "(yes)" and
  "(rev.)" for one seed; higher / lower for none; † where it is held to
  other architectures' noise, ‡ where to the sqrt(2) rule."""
  verdict = test.verdict
  mark = ("†" * _elsewhere(test) + "‡" * (test.sqrt2
                                          and verdict != rs.NO_EFFECT))
  if verdict in (rs.NOT_SIGNIFICANT, rs.NO_EFFECT, rs.UNDETERMINED):
    return {rs.NOT_SIGNIFICANT: "n.s.", rs.NO_EFFECT: "~0",
            rs.UNDETERMINED: "undet."}[verdict] + mark
  if kind == "none":
    word = direction(test, kind).split()[0]
  else:
    word = "yes" if direction(test, kind) == "as the paper" else "**rev.**"
  return (f"({word})" if verdict == rs.INDICATIVE else word) + mark


def full(test, kind: str) -> str:
  """A verdict in words, with its direction when significant or
  indicative, and what its floors were measured on."""
  verdict = test.verdict
  if verdict == rs.INDICATIVE:
    verdict = f"{rs.INDICATIVE}, {direction(test, kind)}"
  elif kind == "none" and verdict in (rs.REPRODUCED, rs.REVERSED):
    verdict = direction(test, kind)
  if _elsewhere(test):
    verdict += f"; {ELSEWHERE}"
  if test.sqrt2 and test.verdict != rs.NO_EFFECT:
    verdict += f"; {SQRT2}"
  return verdict


def evidence(test) -> str:
  """The numbers behind a verdict: the 95% interval (seeds) or the floors
  and what the largest was measured on."""
  if test.ci is not None:
    lo, hi = test.ci
    return f"{test.diff:+.3g} [{lo:+.3g}, {hi:+.3g}], {test.n} seeds"
  if test.floor is None:
    return f"{test.diff:+.3g}, 1 seed, no floor to hold it to"
  ref = test.ref
  what = f"{ref.label} {'rerun' if ref.source == 'rerun' else 'seeds'}"
  low = f"{test.lowest:.2g}"
  lowest = f"; lowest {low}" if low != f"{test.floor:.2g}" else ""
  return (f"{test.diff:+.3g} vs floor {test.floor:.2g} ({what}{lowest}), "
          "1 seed")


def _category(test, kind) -> str:
  """"reversed", "indicative (one seed), as the paper", "higher with
  LocATER", "undetermined", ... (no marks)."""
  if test.verdict in (rs.NOT_SIGNIFICANT, rs.NO_EFFECT, rs.UNDETERMINED):
    return test.verdict
  way = direction(test, kind)
  word = {"opposite": "reversed"}.get(way, way)
  return f"{rs.INDICATIVE}, {word}" if test.verdict == rs.INDICATIVE else word


def counts(tests, kind: str) -> str:
  """"reversed in 1; indicative (one seed), reversed in 7 (6 held to other
  architectures' noise); undetermined in 3; ..." over `tests`."""
  groups = {}
  for t in sorted(tests, key=lambda t: (_RANK[t.verdict],
                                        _category(t, kind))):
    groups.setdefault(_category(t, kind), []).append(t)
  out = []
  for name, g in groups.items():
    moved = sum(_elsewhere(t) for t in g)
    out.append(f"{name} in {len(g)}" + (f" ({moved} {ELSEWHERE})" * bool(
        moved)))
  return "; ".join(out)


def _way(t, toward: bool) -> str:
  """The words for one direction of a pooled test."""
  if t.kind == "none":
    up = (t.sign > 0) == toward
    return f"{'higher' if up else 'lower'} with LocATER"
  return "as the paper" if toward else "against the paper"


def _n(k: int, what: str) -> str:
  return f"{k} {what}{'s' * (k != 1)}"


def ways(t, units: bool = True) -> str:
  """"against the paper in 9 of 12 cells and 3 of 3 units, 3 split", or
  both ways where the cells tie."""
  if t.toward == t.against:
    return (f"{t.toward} of {_n(t.cells, 'cell')} each way" if t.toward
            else f"no difference of either sign in {_n(t.cells, 'cell')}")
  toward = t.toward > t.against
  out = (f"{_way(t, toward)} in {t.toward if toward else t.against} of "
         f"{_n(t.cells, 'cell')}")
  counted = t.units_toward + t.units_against
  split = t.units - counted
  if units:
    out += (f" and {t.units_toward if toward else t.units_against} of "
            f"{_n(counted, 'unit')}" + f", {split} split" * bool(split))
  return out


def _family(t) -> str:
  """Whether a pooled test holds in its family, and its adjusted p."""
  what = ("the 3 primary claims" if t.size == 3 and t.family == "primary"
          else f"its family's {t.size}")
  return (f"{'holds' if t.holds else 'not'} after Holm over {what}, "
          f"adjusted p = {t.holm:.2g}")


def _per_reading(tests) -> str:
  """"literal: against the paper in 6 of 6 cells (p = 0.031), ..."."""
  return ", ".join(
      f"{rundir.READING_NAMES[t.reading]}: "
      f"{ways(t, units=t.units != t.cells)} (p = {t.p:.2g})" for t in tests)


def _range(vs) -> str:
  """The span of the differences (perplexity also relative)."""
  out = (rs.span([v.test.diff for v in vs], "+.3g")
         + UNITS.get(vs[0].quantity, ""))
  if vs[0].quantity == "valid_ppl":
    out += f" ({rs.span([v.test.diff / v.base for v in vs], '+.2%')})"
  return out


def _over_training(mine) -> str:
  over = [v.training for v in mine if v.training]
  if not over:
    return ""
  kind = mine[0].kind
  sign = ("the paper's sign" if kind == "kappa2" else
          f"LocATER {'higher' if mine[0].test.sign > 0 else 'lower'}")
  return (f" Over training (after the first {rs.WARMUP:.0%} of steps), "
          f"{len(over)} cells with curves: "
          f"{counts([t.test for t in over], kind)}; {sign} at "
          f"{rs.span([t.same_sign for t in over], '.0%')} of evaluations.")


def _claim_line(vs, tests, claim, what, kind) -> str:
  mine = [v for v in vs if v.claim == claim and v.kind == kind]
  mine_tests = [t for t in tests if (t.claim, t.kind) == (claim, kind)]
  if not mine or not mine_tests:
    return ""
  both, *readings = mine_tests
  name = (f"{_NAMES[claim]} ({claim}, {what})" if kind == "kappa2"
          else _NAMES[claim])
  line = (f"- **{name}: {ways(both)} (sign test p = {both.p:.2g}; "
          f"{_family(both)}).** "
          + (f"{_per_reading(readings)}. " if len(readings) > 1 else "")
          + f"By cell: {counts([v.test for v in mine], kind)}; difference "
          f"at the last step {_range(mine)}.")
  at = sum(v.at_minimum for v in mine)
  if claim == "B" and kind == "kappa2" and at:
    line += (f" In {at} the kappa2 = 1 group sits at LocATER's own "
             "minimum W* = cI, whose scale grows with kappa2.")
  return line + _over_training(mine)


def _stripe_line(ev) -> str:
  """Fig. 7's verdict, the test it rests on, and the rerun that decides."""
  if not ev.stripes:
    return ""
  verdicts = " / ".join(sorted({v.verdict for v in ev.stripes}))
  earlier = any(v.earlier for v in ev.stripes)
  line = (f"- **Stripes in rho_i (Fig. 7): {verdicts}.** " + " ".join(
      f"{run_cells.reading_name(v.reading)}: stripes in {v.locater[1]} of "
      f"{_n(v.locater[0], 'LocATER map')} and {v.without[1]} of "
      f"{v.without[0]} without." for v in ev.stripes))
  rerun = next(((i, item) for i, item in enumerate(ev.backlog.items, 1)
                if "7" in item.figures), None)
  decides = ("" if rerun is None else
             " The shift test that replaces it (qkspec/report/stripes.py) "
             f"decides on the maps of `{rerun[1].commands[0]}` (item "
             f"{rerun[0]} under \"Still to run\").")
  if earlier:
    return line + (
        " By the superseded test (the spread of the time-averaged profile), "
        "which also counts a smooth gradient over positions as stripes: it "
        "cannot tell stripes in both maps from stripes in neither, and the "
        "records keep its results, not the maps." + decides)
  if any(v.kept for v in ev.stripes):
    return line + (" By the shift test (qkspec/report/stripes.py); the rho "
                   "maps are not in the records (only the test's results): "
                   "the maps and this verdict cannot be redrawn from them.")
  return line + " By the shift test (qkspec/report/stripes.py)."


def _curve_note(trends, claim) -> str:
  """Best kappa2 > 0 against kappa2 = 0 over the cells, in words."""
  mine = [t for t in trends if t.claim == claim]
  if not mine:
    return ""
  slopes = [t.slope for t in mine]
  return (f" The best kappa2 > 0 against 0 (Bonferroni): "
          f"{counts([t.test for t in mine], 'kappa2')}; slope "
          f"{rs.span(slopes, '+.3g')}{UNITS[mine[0].quantity]} per decade.")


def _units_words(ev) -> str:
  """How many units the primary tests have, and why."""
  primary = [t for t in ev.pooled if t.family == "primary"]
  if not primary:
    return ""
  n = max(t.units for t in primary)
  archs = {v.alt_id[0] for v in ev.verdicts if v.kind == "kappa2"}
  per = ", one per architecture" if n == len(archs) else ""
  seeds = ", ".join(map(str, ev.data_seeds))
  return (" A unit is one independent initialisation: cells whose members "
          "start from one (the two readings of one program or of one seed, "
          f"a member trained twice) count once, here {_n(n, 'unit')}{per}; "
          "a unit whose cells disagree counts neither way (split). B, C and "
          "D pooled over both readings are the primary claims, held to Holm "
          "over those 3; per reading, per cell, over training and along "
          "kappa2 the tests are secondary and descriptive. A seed varies the "
          f"initialisation and dropout only: data.seed = {seeds} in every "
          "run, so every unit sees one batch order.")


def _none_intro(ev, mine) -> str:
  distinct = len({(v.base_id[0], s) for v in mine for s in v.base_id[4]})
  copies = sum(not run_cells.is_locater(m) for r in ev.runs
               for m in r.members)
  twice = (f" ({copies} trained: a member trained twice counts once)"
           * (copies > distinct))
  rule = any(v.test.sqrt2 for v in mine)
  return (f"Beyond the paper (secondary; it compares with no LocATER only "
          f"for Fig. 7's stripes): no LocATER -> LocATER (kappa1 = "
          f"{mine[0].kappa1:g}, kappa2 = {mine[0].kappa2:g}), "
          f"{_n(len({(v.label, v.reading) for v in mine}), 'cell')} on "
          f"{_n(distinct, 'distinct no-LocATER member')}{twice}"
          + (", one seed each" if all(v.test.n == 1 for v in mine) else "")
          + ("; every floor includes sqrt(2) x the LocATER group's seed "
             "spread (‡), a rule that errs both ways, by quantity, until the "
             "backlog's paired no-LocATER seeds exist" if rule else "")
          + "; pooled over both readings, a family of its own:")


def _claims(vs, kind) -> dict[str, str]:
  """claim -> what it says, in the verdicts' order."""
  return dict((v.claim, v.what) for v in vs if v.kind == kind)


def answer(ev) -> list[str]:
  """The paper's claims in words, then LocATER against none."""
  paper = [_claim_line(ev.verdicts, ev.pooled, c, w, "kappa2")
           + _curve_note(ev.trends, c)
           for c, w in _claims(ev.verdicts, "kappa2").items()]
  paper.append(_stripe_line(ev))
  out = ["The paper's claims, kappa2 = 0 -> 1 at kappa1 = 100 (Figs. 6, "
         "8-12; stripes: Fig. 7), one cell per figure and reading of kappa. "
         "Per claim: the cells' directions (the sign of each difference, "
         "significant or not) pooled by an exact sign test over independent "
         "units; then each cell's verdict." + _units_words(ev), ""]
  out += [x for x in paper if x]
  mine = [v for v in ev.verdicts if v.kind == "none"]
  if mine:
    out += ["", _none_intro(ev, mine), ""]
    out += [x for x in (_claim_line(ev.verdicts, ev.pooled, c, w, "none")
                        for c, w in _claims(mine, "none").items()) if x]
  return out


def verdict_table(vs) -> list[str]:
  """One row per figure and reading: B-D (C, D also over training) for
  kappa2 0 -> 1, and B-D for none -> LocATER."""
  cells = {}
  for v in vs:
    cells.setdefault((v.label, v.reading), {})[v.kind, v.claim] = v
  head = ["figure", "reading", "seeds", "B", "C", "D", "C over training",
          "D over training", "none: B", "none: C", "none: D"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for (label, reading), row in sorted(
      cells.items(), key=lambda kv: run_cells.cell_order(kv[0])):
    def cell(kind, claim, over=False, row=row):
      v = row.get((kind, claim))
      test = v and (v.training.test if over and v.training else
                    None if over else v.test)
      return short(test, kind) if test else "-"
    seeds = max(v.test.n for v in row.values())
    lines.append("| " + " | ".join(
        [label, run_cells.reading_name(reading), str(seeds)]
        + [cell("kappa2", c) for c in "BCD"]
        + [cell("kappa2", c, True) for c in "CD"]
        + [cell("none", c) for c in "BCD"]) + " |")
  return lines


def legend() -> str:
  return ("yes / **rev.**: significant at 95% (paired t-test over seeds) "
          "in the paper's direction / against it; (yes) / (**rev.**): one "
          "seed beyond every floor the records measure for its reading "
          "(indicative); undet.: beyond some of those floors, not all; †: "
          "no noise measured on the cell's own architecture and reading, "
          "held to other architectures' noise; ‡: a floor by the sqrt(2) "
          "rule; n.s.: not significant; ~0: below the minimal effect; -: not "
          "run. B-D and their over-training columns: kappa2 0 -> 1 (the "
          "paper's claim); none: no LocATER -> LocATER (beyond the paper), "
          "higher or lower with LocATER.")


def detail_table(vs) -> list[str]:
  """Every verdict once, with its numbers."""
  lines = ["| figure | reading | contrast | claim | base -> alt | "
           "difference, 95% CI or floor | verdict | over training |",
           "|" + "---|" * 8]
  for v in vs:
    t = v.training
    sign = ("as the paper" if v.kind == "kappa2" else
            f"LocATER {'higher' if v.test.sign > 0 else 'lower'}")
    over = "-" if not t else (
        f"{full(t.test, v.kind)}: {evidence(t.test)}; {t.same_sign:.0%} of "
        f"{t.evaluations} evaluations {sign}")
    short_ = ("" if v.final_step >= run_cells.PAPER_STEPS else
              f" (shortened: {v.final_step:,} of "
              f"{run_cells.PAPER_STEPS:,} steps)")
    lines.append(
        f"| {v.label} | {run_cells.reading_name(v.reading)} | {v.kind} | "
        f"{v.claim} | {_num(v.base)} -> {_num(v.alt)} | {evidence(v.test)} "
        f"| {full(v.test, v.kind)}{short_} | {over} |")
  return lines


def _num(x) -> str:
  return f"{x:.4g}" if np.isfinite(x) else "n/a"


def kappa2_table(trends) -> list[str]:
  """`verdicts.trends` as one table: a row per figure, reading, claim."""
  lines = ["| figure | reading | claim | slope per decade of kappa2, 95% CI "
           "| best kappa2 > 0 | best - kappa2 = 0, CI or floor | verdict |",
           "|" + "---|" * 7]
  for t in sorted(trends, key=lambda t: (run_cells.label_order(t.label),
                                         t.reading, t.claim)):
    ci = ("" if t.slope_ci is None else
          f" [{t.slope_ci[0]:+.3g}, {t.slope_ci[1]:+.3g}]")
    j = t.test
    diff = f"{j.diff:+.3g}" + (
        f" [{j.ci[0]:+.3g}, {j.ci[1]:+.3g}]" if j.ci else
        f" vs floor {j.floor:.2g}" if j.floor is not None else "")
    lines.append(f"| {t.label} | {run_cells.reading_name(t.reading)}"
                 f" | {t.claim} | {t.slope:+.3g}{ci}, {t.n} "
                 f"seed{'s' * (t.n > 1)} | {t.best_kappa2:g} | {diff} "
                 f"| {full(j, 'kappa2')} |")
  return lines
