r"""Trained W_QK against the LocATER penalty's own minimum (REPRODUCTION.md).

The penalty alone is smallest at :math:`W^* = cI`
(`qkspec.theory.locater.penalty_minimum`), whose scale grows with
:math:`\kappa_2`, the same under both readings. A W_QK at :math:`W^*` is
set by the penalty, not the data loss, and there claim B must come out
reversed. `isotropy` = scale / `spectrum.scale_floor(trace)` (1 exactly for
a multiple of I); a group is at W* when its trace is within `NEAR` of W*'s
and its isotropy below 1 + `NEAR` (None for kappa2 = 0). `compare` gives
one `Minimum` per LocATER group, once; the section's words read them.
"""
import dataclasses
import math

import numpy as np

from qkspec.report import run_cells
from qkspec.report import stats
from qkspec.theory import locater
from qkspec.theory import spectrum

NEAR = 0.05          # relative distance that still counts as "at W*"


@dataclasses.dataclass(frozen=True)
class Minimum:
  """A LocATER group against W*: traces, scales and whether it is at W*."""
  label: str
  reading: str
  kappa1: float
  kappa2: float
  d_model: int
  star_trace: float
  star_scale: float
  trace: float
  scale: float
  isotropy: float
  at_minimum: bool | None      # None for kappa2 = 0


def compare(groups) -> tuple[Minimum, ...]:
  """W*'s and the trained trace and scale, `isotropy` and `at_minimum` of
  each LocATER group (`run_cells.Group`) with a width."""
  out = []
  for g in groups:
    d = g.d_model
    if not d or g.kappa1 <= 0:
      continue
    star = locater.penalty_minimum(g.kappa1, g.kappa2, d, g.target)
    trace, scale = g.mean["trace"], g.mean["scale"]
    floor = float(spectrum.scale_floor(trace, d))
    isotropy = scale / floor if floor > 0 else math.inf
    star_trace = float(star.trace)
    at = None
    if g.kappa2 > 0 and np.isfinite(trace) and star_trace != 0:
      at = bool(abs(trace / star_trace - 1) <= NEAR
                and isotropy <= 1 + NEAR)
    out.append(Minimum(label=g.label, reading=g.reading, kappa1=g.kappa1,
                       kappa2=g.kappa2, d_model=d, star_trace=star_trace,
                       star_scale=float(star.scale), trace=trace,
                       scale=scale, isotropy=isotropy, at_minimum=at))
  return tuple(out)


def at_minimum(cs) -> frozenset:
  """The (label, reading, kappa1, kappa2) of the groups at W*."""
  return frozenset((c.label, c.reading, c.kappa1, c.kappa2) for c in cs
                   if c.at_minimum)


def markdown(cs, readings: dict) -> list[str]:
  """The report section of the `compare` rows `cs`: per figure and
  reading, W* against the trained trace and scale at the strongest kappa2,
  and the kappa2s at W*."""
  if not cs:
    return []
  md = ["## LocATER's own minimum", "",
        "Without the data loss, kappa1 tr(W^T W) + kappa2 (tr W - 1)^2 is "
        "smallest at W_QK = W* = cI, c = kappa2 / (kappa1 + kappa2 d) "
        "(`qkspec.theory.locater.penalty_minimum`): its scale trace^2 / d "
        "grows with kappa2, so claim B can only come from the data loss. "
        "*scale / floor*: the trained scale over trace^2 / d, the least a "
        "W_QK of its trace can have (1 for a multiple of I). A group is *at "
        f"W** when its trace is within {NEAR:.0%} of W*'s and scale / floor "
        f"<= {1 + NEAR:g}: there the penalty, not the data, sets W_QK. "
        "Every group: summary.csv.", "",
        "| figure | reading | d | kappa2 | W* trace | trace | W* scale | "
        "scale | scale / floor | at W* for kappa2 in |", "|" + "---|" * 10]
  groups = {}
  for c in cs:
    groups.setdefault((c.label, c.reading), []).append(c)
  for (label, reading), g in sorted(groups.items(),
                                    key=lambda kv: run_cells.cell_order(
                                        kv[0])):
    c = max(g, key=lambda c: c.kappa2)
    at = ", ".join(f"{x.kappa2:g}" for x in sorted(
        g, key=lambda x: x.kappa2) if x.at_minimum) or "none"
    md.append(f"| {label} | {readings.get(reading, reading)} | "
              f"{c.d_model} | {c.kappa2:g} | {c.star_trace:.4g} | "
              f"{c.trace:.4g} | {c.star_scale:.4g} | "
              f"{c.scale:.4g} | {c.isotropy:.4g} | {at} |")
  return md


def target_line(cs, readings: dict) -> str:
  """The trained trace at the strongest kappa2 against the target and W*,
  per reading; "" without LocATER groups."""
  cs = [c for c in cs if c.kappa2 > 0]
  if not cs:
    return ""
  top = max(c.kappa2 for c in cs)
  cs = [c for c in cs if c.kappa2 == top]
  by_reading = {}
  for c in cs:
    by_reading.setdefault(c.reading, []).append(c.trace)
  trained = "; ".join(f"{readings.get(r, r)} {stats.span(t)}"
                      for r, t in sorted(by_reading.items()))
  star = ", ".join(f"{c.star_trace:.2g} (d = {c.d_model})"
                   for c in sorted({c.d_model: c for c in cs}.values(),
                                   key=lambda c: c.d_model))
  return (f"tr(W_QK) never reaches its target 1: at kappa2 = {top:g} the "
          f"trained trace is {trained}; the penalty alone stops at W*'s "
          f"trace {star}, as kappa1 = {cs[0].kappa1:g} pulls W_QK to 0 "
          "(section \"LocATER's own minimum\").")


def uniform_entropy(seq_len: int) -> float:
  r"""Mean entropy of uniform causal attention over `seq_len` = T queries:
  query t sees t keys, :math:`\frac1T \sum_{t=1}^T \ln t = \ln(T!) / T`
  (3.21 nats at T = 64), the mean `layer_stats` takes."""
  return math.lgamma(seq_len + 1) / seq_len


def bias_line(cs, groups, readings: dict) -> str:
  """Where a reading's strongest kappa2 sits at W* in every figure (`cs`
  of the `groups`): the scale at kappa2 = 0 and W*, and the entropy
  against uniform attention that the query bias then sets; "" where none
  does."""
  out = []
  for reading in sorted({c.reading for c in cs}):
    mine = [c for c in cs if c.reading == reading]
    top = max(c.kappa2 for c in mine)
    if not top or not all(c.at_minimum for c in mine if c.kappa2 == top):
      continue
    locater = [g for g in groups if g.reading == reading and g.kappa1 > 0]
    zero = [g.mean["scale"] for g in locater if g.kappa2 == 0]
    t = {g.seq_len for g in locater} - {None}
    if not zero or len(t) != 1:
      continue
    t = t.pop()
    out.append(
        f"Under the {readings.get(reading, reading)} reading LocATER holds "
        f"W_QK = W_Q^T W_K at its own minimum in every figure (scale "
        f"{stats.span(zero)} at kappa2 = 0, W*'s "
        f"{stats.span([c.star_scale for c in mine if c.kappa2 == top])} "
        f"at kappa2 = {top:g}; section \"LocATER's own minimum\"). Of the "
        "logits (W_Q x_i + b_Q)^T (W_K x_j + b_K), what varies with the key "
        "j is then x_i^T W_QK x_j ~ 0 and b_Q^T W_K x_j, which LocATER (a "
        "penalty on W_QK alone) leaves free: the attention entropy, "
        f"{stats.span([g.mean['entropy'] for g in locater], '.3g')} nats, "
        "below "
        f"the {uniform_entropy(t):.3g} of uniform attention over T = {t} "
        "causal keys (ln(T!) / T), is set by the query bias b_Q, not by "
        "kappa2.")
  return " ".join(out)


def star_curve(cs):
  """(kappa2s, W* scales) of one figure's `compare` rows, for panel B."""
  cs = sorted({c.kappa2: c for c in cs}.values(), key=lambda c: c.kappa2)
  return [c.kappa2 for c in cs], [c.star_scale for c in cs]
