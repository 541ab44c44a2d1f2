r"""Trained W_QK against the LocATER penalty's own minimum (REPRODUCTION.md).

The penalty alone is smallest at :math:`W^* = cI`, with
:math:`\mathrm{tr}\,W^* = \kappa_2 d\tau/(\kappa_1 + \kappa_2 d)` and scale
:math:`(\mathrm{tr}\,W^*)^2/d` (`qkspec.theory.locater.penalty_minimum`).
For fixed :math:`\kappa_1` that scale grows with :math:`\kappa_2`, and both
readings of :math:`\kappa` share :math:`W^*` (they differ by one factor on
both strengths). A trained W_QK at :math:`W^*` is set by the penalty, not
the data loss, and there claim B (scale shrinks as :math:`\kappa_2` grows)
must come out reversed.

`isotropy` = scale / `spectrum.scale_floor(trace)`, the least scale a
matrix of that trace can have (1 exactly for a multiple of I; >= 1 on layer
means too, by Jensen). A group is at W* when its trace is within `NEAR` of
W*'s and its isotropy below 1 + `NEAR` (None for kappa2 = 0, where W* = 0).
"""
import math

import numpy as np

from qkspec.experiments import report_runs
from qkspec.theory import locater
from qkspec.theory import spectrum

NEAR = 0.05          # relative distance that still counts as "at W*"
_YES_NO = {None: "-", True: "yes", False: "no"}


def compare(rows) -> list[dict]:
  """W*'s and the trained trace and scale, `isotropy` and `at_minimum` of
  each LocATER row (`report_runs.summarize`) that has `d_model`."""
  out = []
  for r in rows:
    d = r.get("d_model")
    if not d or r["kappa1"] <= 0:
      continue
    star = locater.penalty_minimum(r["kappa1"], r["kappa2"], d,
                                   r.get("target", 1.0))
    trace, scale = r["trace_mean"], r["scale_mean"]
    floor = float(spectrum.scale_floor(trace, d))
    isotropy = scale / floor if floor > 0 else math.inf
    star_trace = float(star.trace)
    at = None
    if r["kappa2"] > 0 and np.isfinite(trace) and star_trace != 0:
      at = bool(abs(trace / star_trace - 1) <= NEAR
                and isotropy <= 1 + NEAR)
    out.append(dict(label=r["label"], reading=r["reading"],
                    kappa1=r["kappa1"], kappa2=r["kappa2"], d_model=d,
                    star_trace=star_trace, star_scale=float(star.scale),
                    trace=trace, scale=scale, isotropy=isotropy,
                    at_minimum=at))
  return out


def _summary_line(cs, reading_name) -> str:
  """Penalty-alone vs trained scale from the weakest to the strongest
  kappa2, and the groups at W*."""
  lo, hi = cs[0], cs[-1]
  if len(cs) == 1:
    return (f"{lo['label']}, {reading_name}: penalty alone, kappa2 = "
            f"{lo['kappa2']:g}: scale {lo['star_scale']:.4g}; trained: "
            f"{lo['scale']:.4g}; {'at' if lo['at_minimum'] else 'not at'} "
            "W*.")
  at = [c for c in cs if c["at_minimum"]]
  kappas = ", ".join(f"{c['kappa2']:g}" for c in at)
  grows = ("grows" if hi["star_scale"] > lo["star_scale"]
           else "does not grow")
  where = (f"at W* for kappa2 in {{{kappas}}}" if at
           else "at W* for no kappa2 > 0")
  return (f"{lo['label']}, {reading_name}: penalty alone, kappa2 = "
          f"{lo['kappa2']:g} -> {hi['kappa2']:g}: scale {lo['star_scale']:.4g}"
          f" -> {hi['star_scale']:.4g} ({grows}); "
          f"trained: {lo['scale']:.4g} -> {hi['scale']:.4g}; {where}.")


def markdown(rows, readings: dict) -> list[str]:
  """The report section (`readings`: reading -> its name)."""
  cs = compare(rows)
  if not cs:
    return []
  md = ["## LocATER's own minimum", "",
        "Without the data loss, kappa1 tr(W^T W) + kappa2 (tr W - 1)^2 is "
        "smallest at W_QK = W* = cI, c = kappa2 / (kappa1 + kappa2 d): "
        "trace kappa2 d / (kappa1 + kappa2 d), scale trace^2 / d "
        "(`qkspec.theory.locater.penalty_minimum`). At fixed kappa1 its "
        "scale grows with kappa2, so claim B can only come from the data "
        "loss; both readings of kappa share W* (one factor on both "
        "strengths). *scale / floor* is the trained scale over the least "
        "scale a W_QK of its trace can have, trace^2 / d (1 exactly when "
        "W_QK is a multiple of I). A group is *at W** when its trace is "
        f"within {NEAR:.0%} of W*'s and scale / floor <= {1 + NEAR:g}: "
        "there the penalty, not the data, sets W_QK.", ""]
  groups = {}
  for c in cs:
    groups.setdefault((c["label"], c["reading"]), []).append(c)
  for (label, reading), g in sorted(groups.items(),
                                    key=report_runs.cell_order):
    g = sorted(g, key=lambda c: c["kappa2"])
    name = readings.get(reading, reading)
    kappa1 = "/".join(sorted({f"{c['kappa1']:g}" for c in g}))
    md += [f"### {label}, {name} (d = {g[0]['d_model']}, kappa1 = {kappa1})",
           "", "| kappa2 | W* trace | trace | W* scale | scale | "
           "scale / floor | at W* |", "|" + "---|" * 7]
    md += [f"| {c['kappa2']:g} | {c['star_trace']:.4g} | "
           f"{c['trace']:.4g} | {c['star_scale']:.4g} | {c['scale']:.4g} | "
           f"{c['isotropy']:.4g} | {_YES_NO[c['at_minimum']]} |" for c in g]
    md += ["", f"- {_summary_line(g, name)}", ""]
  return md


def annotate(verdict_list, rows) -> list[dict]:
  """`report_claims.verdicts`, each claim-B line whose stronger group sits
  at W* saying so (B cannot come out "reproduced" there)."""
  at = {(c["label"], c["reading"], c["kappa1"], c["kappa2"])
        for c in compare(rows) if c["at_minimum"]}
  out = []
  for v in verdict_list:
    key = (v["label"], v["reading"], v.get("kappa1"), v.get("kappa2"))
    if v["claim"] == "B" and key in at:
      v = dict(v, text=v["text"] + "; the kappa2 = "
               f"{v['kappa2']:g} group sits at W*, LocATER's own minimum, "
               "whose scale grows with kappa2 (section \"LocATER's own "
               "minimum\")")
    out.append(v)
  return out


def star_curve(rows):
  """(kappa2s, W* scales) of one figure's LocATER rows, for panel B."""
  cs = sorted({c["kappa2"]: c for c in compare(rows)}.values(),
              key=lambda c: c["kappa2"])
  return [c["kappa2"] for c in cs], [c["star_scale"] for c in cs]
