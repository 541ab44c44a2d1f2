"""Verdicts on the paper's claims B-D (Sec. 7, Fig. 6B-D; Figs. 8-12).

Per figure and reading of kappa, two contrasts: "kappa2", kappa2 = 0 -> 1
at kappa1 = 100, the paper's claim (scale shrinks (B), entropy higher (C),
perplexity lower (D)); and "none", no LocATER -> kappa2 = 1, beyond the
paper (which compares with no LocATER only for Fig. 7's stripes). Each is
read at the final step (`judge`: `stats`; one seed: `floors`) and, for C
and D, over the evaluations after warm-up (`over_training`), into one
typed `Verdict` per cell and claim.

C and D are also read as curves over kappa2 (`trends`, Fig. 6C-D): over
the LocATER groups (kappa1 = 100), the slope of the metric against log10
kappa2 over kappa2 > 0 (paired over seeds, or from one seed's scatter
about the line), and the best kappa2 > 0 against kappa2 = 0 at the
Bonferroni level for the groups it was chosen from.
"""
import dataclasses

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


@dataclasses.dataclass(frozen=True)
class Test:
  """The numbers behind one verdict (`judge`)."""
  verdict: str                 # stats.REPRODUCED, ..., stats.NO_EFFECT
  diff: float                  # mean alt - base
  sign: int                    # the paper's (or LocATER's) direction
  n: int                       # seeds
  minimal: float
  ci: tuple | None = None      # two seeds or more: the interval
  p: float | None = None
  floor: float | None = None   # one seed: the largest floor
  ref: floors.Reference | None = None      # its noise
  lowest: float | None = None  # one seed: the smallest floor
  here: bool = True            # one seed: a noise measured on its
                               # architecture
  sqrt2: bool = False          # one seed: a floor by the sqrt(2) rule


@dataclasses.dataclass(frozen=True)
class Training:
  """Claim C or D averaged over the evaluations after warm-up."""
  test: Test
  start: int                   # the first step counted
  evaluations: int
  same_sign: float             # share of evaluations of the expected sign


@dataclasses.dataclass(frozen=True)
class Verdict:
  """One claim on one figure, reading and contrast."""
  label: str
  figure: str
  reading: str
  kind: str                    # "kappa2" or "none"
  claim: str                   # "B", "C", "D"
  what: str
  quantity: str
  kappa1: float                # the alt group's
  kappa2: float
  base: float                  # group means
  alt: float
  seeds: tuple[int, ...]
  base_id: tuple               # `run_cells.Group.identity`s
  alt_id: tuple
  inits: frozenset             # (layers, d, seed) its members start from
  final_step: int
  test: Test
  training: Training | None
  at_minimum: bool             # its alt group sits at LocATER's own minimum


@dataclasses.dataclass(frozen=True)
class Trend:
  """C or D as a curve over kappa2 on one figure and reading."""
  label: str
  reading: str
  claim: str
  quantity: str
  slope: float                 # per decade of kappa2
  slope_ci: tuple | None
  slope_p: float | None
  n: int                       # seeds
  best_kappa2: float
  level: float                 # Bonferroni's, for the best
  test: Test                   # best against kappa2 = 0 (p Bonferroni'd)


def judge(quantity, sign, d, m0, m1, refs, arch, level: float = rs.LEVEL
          ) -> Test:
  """The verdict, with its numbers, on per-seed differences `d` between
  group means `m0` -> `m1` of a cell of `arch`: paired with two seeds,
  else against the floors of `refs` (`floors.one_seed`), both at
  `level`."""
  if len(d) < 2:
    diff = float(d[0]) if len(d) else m1 - m0
    floor = floors.one_seed(diff, refs, m0, m1, arch, level)
    minimal = rs.min_effect(quantity, m0, m1)
    return Test(verdict=rs.decide(diff, sign, minimal, floor.outcome, True),
                diff=diff, sign=sign, n=len(d), minimal=minimal, p=floor.p,
                floor=floor.floor, ref=floor.ref, lowest=floor.lowest,
                here=floor.here, sqrt2=any(not r.paired for r in refs))
  paired = rs.paired_test(d, level)
  minimal = rs.min_effect(quantity, m0, m1)
  outcome = rs.SIGNIFICANT if paired["significant"] else rs.BELOW
  return Test(verdict=rs.decide(paired["mean"], sign, minimal, outcome,
                                False),
              diff=paired["mean"], sign=sign, n=len(d), minimal=minimal,
              ci=paired["ci"], p=paired["p"])


def _curve_of(member, key):
  steps, values = member["metrics"].get(key, ((), ()))
  return (steps, values) if len(steps) > 1 else None


def over_training(members, base, alt, claim, sign, refs, arch
                  ) -> Training | None:
  """Claim C or D after warm-up: `judge` of each seed's time-averaged
  alt - base, and the share of evaluations of the expected sign."""
  key = OVER_TRAINING.get(claim)
  if key is None or not members:
    return None
  quantity = dict((c, q) for c, q, _, _ in CLAIMS)[claim]
  start = int(rs.WARMUP * min(base.final_step, alt.final_step))

  def curves(group):
    return {m["seed"]: _curve_of(m, key) for m in members
            if (m["kappa1"], m["kappa2"], m["target"])
            == (group.kappa1, group.kappa2, group.target)}
  b, a = curves(base), curves(alt)
  per_seed = [rs.time_average(b[s], a[s], start)
              for s in sorted(set(a) & set(b)) if a[s] and b[s]]
  per_seed = [p for p in per_seed if p[2] >= 2]
  if not per_seed:
    return None
  pos = np.mean([p[1] for p in per_seed])
  return Training(
      test=judge(quantity, sign, np.array([p[0] for p in per_seed]),
                 base.mean[quantity], alt.mean[quantity], refs, arch),
      start=start, evaluations=per_seed[0][2],
      same_sign=float(pos if sign > 0 else 1 - pos))


def verdicts(cells, held, at_minimum=frozenset()) -> tuple[Verdict, ...]:
  """Claims B, C, D per cell (`run_cells.cells`) and contrast, one seed
  held to the noises `held` ((reading, kind, quantity) ->
  `floors.candidates`); `at_minimum`: the (label, reading, kappa1, kappa2)
  groups at LocATER's own minimum."""
  out = []
  for (label, reading), cell in cells.items():
    for c in cell.contrasts:
      base, alt = c.base, c.alt
      for claim, quantity, sign, what in CLAIMS:
        m0, m1 = base.mean[quantity], alt.mean[quantity]
        d = c.diffs[quantity]
        if len(d) < 2:
          d = np.array([m1 - m0]) if np.isfinite(m1 - m0) else np.array([])
        refs = held.get((reading, c.kind, quantity), ())
        out.append(Verdict(
            label=label, figure=alt.figure, reading=reading, kind=c.kind,
            claim=claim, what=what, quantity=quantity, kappa1=alt.kappa1,
            kappa2=alt.kappa2, base=m0, alt=m1, seeds=c.seeds,
            base_id=base.identity, alt_id=alt.identity,
            inits=frozenset((*g.arch, s) for g in (base, alt)
                            for s in g.seeds),
            final_step=min(base.final_step, alt.final_step),
            test=judge(quantity, sign, d, m0, m1, refs, alt.arch),
            training=over_training(cell.counted, base, alt, claim, sign,
                                   refs, alt.arch),
            at_minimum=(label, reading, alt.kappa1, alt.kappa2)
            in at_minimum))
  return tuple(out)


def trend(groups, quantity, sign, refs=(), arch=(0, 0)) -> dict | None:
  """Slope per decade of kappa2 and the best kappa2 > 0 against 0 of
  `quantity` over one figure and reading's LocATER `groups` (a `Trend`'s
  fields but its place)."""
  locater = sorted((g for g in groups if g.kappa1 > 0),
                   key=lambda g: g.kappa2)
  base = next((g for g in locater if g.kappa2 == 0), None)
  swept = [g for g in locater if g.kappa2 > 0]
  if base is None or len(swept) < 2:
    return None
  values = [dict(zip(g.seeds, g.values[quantity])) for g in [base] + swept]
  seeds = sorted(set.intersection(*(set(v) for v in values)))
  if not seeds:
    return None
  x = np.log10([g.kappa2 for g in swept])
  per_seed = [rs.slope(x, [v[s] for v in values[1:]]) for s in seeds]
  if len(seeds) >= 2:
    test = rs.paired_test([p["slope"] for p in per_seed])
    fit = dict(slope=test["mean"], ci=test["ci"], p=test["p"])
  else:
    fit = per_seed[0]
  best = (min if sign < 0 else max)(swept, key=lambda g: g.mean[quantity])
  at_best = values[1 + swept.index(best)]
  d = np.array([at_best[s] - values[0][s] for s in seeds])
  level = rs.bonferroni(len(swept))
  j = judge(quantity, sign, d, base.mean[quantity], best.mean[quantity],
            tuple(refs), arch, level)
  p = None if j.p is None else min(1.0, len(swept) * j.p)
  return dict(slope=fit["slope"], slope_ci=fit["ci"], slope_p=fit["p"],
              n=len(seeds), best_kappa2=best.kappa2, level=level,
              test=dataclasses.replace(j, p=p))


def trends(cells, held) -> tuple[Trend, ...]:
  """`trend` of each of `TREND_CLAIMS` per cell, in figure order, one
  seed held to the noises `held` (as `verdicts`)."""
  out = []
  for (label, reading), cell in cells.items():
    for claim, quantity, sign in TREND_CLAIMS:
      refs = held.get((reading, "kappa2", quantity), ())
      t = trend(cell.groups, quantity, sign, refs, cell.groups[0].arch)
      if t:
        out.append(Trend(label=label, reading=reading, claim=claim,
                         quantity=quantity, **t))
  return tuple(out)
