"""Each claim pooled over the cells, and the report's family of tests.

Cells that are each below the minimal effect or not significant can still
agree in sign. `claim_tests` counts, per claim, contrast and reading (and
both readings together), the cells whose difference has the paper's sign
and those against it, and runs an exact two-sided sign test over the
*independent* cells (`units`: cells that share a member, such as a
no-LocATER run counted under both readings, are one unit, counted only when
its cells agree). `family` lists every test the report makes, these
included; `with_holm` marks which pooled directions hold after Holm's
correction over all of them.
"""
import numpy as np

from qkspec.report import run_cells
from qkspec.report import stats as rs
from qkspec.report import verdicts as rv

BOTH = "both"            # the two readings pooled


def units(vs) -> list[list[dict]]:
  """The cells `vs` grouped where they share a member (base or alt), in
  the order of their first cell."""
  groups = []                          # [(member ids, cells)]
  for v in vs:
    ids = {v["base_id"], v["alt_id"]}
    joined = [g for g in groups if g[0] & ids]
    merged = (set(ids).union(*(g[0] for g in joined)),
              [c for g in joined for c in g[1]] + [v])
    groups = [g for g in groups if g not in joined] + [merged]
  return sorted((g[1] for g in groups), key=lambda cs: vs.index(cs[0]))


def _sign(cells) -> int:
  """+1 / -1 where every cell's difference has that sign, else 0."""
  signs = {int(np.sign(v["diff"])) for v in cells}
  return signs.pop() if len(signs) == 1 else 0


def sign_test(vs) -> dict:
  """Cells with the paper's sign (`toward`) and against (`against`), the
  independent units each way, and the sign test's p over the units."""
  sign = vs[0]["sign"]
  by_unit = [_sign(u) * sign for u in units(vs)]
  toward, against = by_unit.count(1), by_unit.count(-1)
  return dict(cells=len(vs), units=len(by_unit), runs=len(
      {v["base_id"] for v in vs}),
              toward=int(sum(np.sign(v["diff"]) == sign for v in vs)),
              against=int(sum(np.sign(v["diff"]) == -sign for v in vs)),
              units_toward=toward, units_against=against,
              p=rs.sign_test(toward, toward + against))


def claim_tests(vs) -> list[dict]:
  """`sign_test` per contrast, claim and reading (`BOTH` first)."""
  out = []
  for kind in ("kappa2", "none"):
    for claim, quantity, sign, _ in rv.CLAIMS:
      mine = [v for v in vs if (v["kind"], v["claim"]) == (kind, claim)
              and np.isfinite(v["diff"])]
      for reading in (BOTH,) + tuple(run_cells.READINGS):
        cells = [v for v in mine if reading in (BOTH, v["reading"])]
        if cells:
          out.append(dict(sign_test(cells), kind=kind, claim=claim,
                          quantity=quantity, sign=sign, reading=reading))
  return out


def family(vs, trends, stripe_vs, pooled) -> list[tuple[str, float]]:
  """(what, p) of every test the report makes: each cell's final-step
  test, each over-training test, each slope and best-kappa2 test of the
  curves (Bonferroni-adjusted within its curve), each stripe test and each
  pooled sign test."""
  out = [("final step", v["p"]) for v in vs]
  out += [("over training", v["training"]["p"]) for v in vs
          if v.get("training")]
  out += [(what, t[key]) for t in trends for what, key in
          (("slope over kappa2", "slope_p"), ("best kappa2", "p"))]
  out += [("stripe test", p) for v in stripe_vs for p in v["p_values"]]
  out += [("pooled sign test", t["p"]) for t in pooled]
  return [(what, p) for what, p in out if p is not None]


def with_holm(pooled, tests) -> list[dict]:
  """`pooled` (which ends `tests`), each with its Holm-adjusted p over
  `tests` (`holm`) and whether its direction `holds` there."""
  adjusted = rs.holm([p for _, p in tests])[len(tests) - len(pooled):]
  return [dict(t, holm=float(h), holds=bool(h < 1 - rs.LEVEL),
               family=len(tests)) for t, h in zip(pooled, adjusted)]


def family_words(tests) -> str:
  """"72 final-step tests, 40 over training, ..." of `family`."""
  counts = {}
  for what, _ in tests:
    counts[what] = counts.get(what, 0) + 1
  return ", ".join(f"{n} {what}" for what, n in counts.items())
