"""Each claim pooled over the cells in independent units, and its family.

Cells that are each below the minimal effect or not significant can still
agree in sign. `claim_tests` counts, per contrast, claim and reading (and
both readings together), the cells whose difference has the expected sign
and those against it, and runs an exact two-sided sign test over
independent *units* (`units`): one per independent initialisation. Cells
whose members start from one initialisation (layers, d, seed) -- both
readings of one program, two runs of one seed, one member trained twice --
are one unit, counted only where its cells agree.

The family is fixed before the data: B, C and D of the kappa2 contrast
pooled over both readings are the `PRIMARY` claims, held to Holm's
correction over those 3; the none contrast's three, pooled over both
readings, are a secondary family of their own (`NONE`); per reading, per
cell, over training and along kappa2 the tests are descriptive.
"""
import dataclasses

import numpy as np

from qkspec.report import run_cells
from qkspec.report import stats as rs

BOTH = "both"            # the two readings pooled
PRIMARY, NONE = "primary", "none"      # the families (kind of contrast)


@dataclasses.dataclass(frozen=True)
class Pooled:
  """One claim's cells pooled by an exact sign test over their units."""
  kind: str                # "kappa2" or "none"
  claim: str
  quantity: str
  sign: int
  reading: str             # a reading, or BOTH
  cells: int
  toward: int              # cells of the expected sign
  against: int
  units: int
  units_toward: int
  units_against: int       # the others are split: their cells disagree
  p: float
  family: str | None = None        # PRIMARY, NONE, or None: descriptive
  size: int = 0                    # the family's tests
  holm: float | None = None        # Holm-adjusted p in its family

  @property
  def holds(self) -> bool:
    """Does its direction hold at family-wise 5%?"""
    return self.holm is not None and self.holm < 1 - rs.LEVEL


def units(vs) -> list[list]:
  """The cells `vs` grouped where their members share an initialisation,
  in the order of their first cell."""
  groups = []                          # [(initialisations, cells)]
  for v in vs:
    joined = [g for g in groups if g[0] & v.inits]
    merged = (set(v.inits).union(*(g[0] for g in joined)),
              [c for g in joined for c in g[1]] + [v])
    groups = [g for g in groups if g not in joined] + [merged]
  first = {id(v): i for i, v in enumerate(vs)}
  return sorted((g[1] for g in groups), key=lambda cs: first[id(cs[0])])


def _sign(cells) -> int:
  """+1 / -1 where every cell's difference has that sign, else 0."""
  signs = {int(np.sign(v.test.diff)) for v in cells}
  return signs.pop() if len(signs) == 1 else 0


def sign_test(vs, **where) -> Pooled:
  """`Pooled` of the cells `vs` of one claim (`where`: kind, claim,
  quantity, sign, reading)."""
  sign = vs[0].test.sign
  by_unit = [_sign(u) * sign for u in units(vs)]
  toward, against = by_unit.count(1), by_unit.count(-1)
  return Pooled(cells=len(vs), units=len(by_unit),
                toward=int(sum(np.sign(v.test.diff) == sign for v in vs)),
                against=int(sum(np.sign(v.test.diff) == -sign for v in vs)),
                units_toward=toward, units_against=against,
                p=rs.sign_test(toward, toward + against), **where)


def _family(tests) -> list[Pooled]:
  """`tests` with their Holm-adjusted p over them."""
  adjusted = rs.holm([t.p for t in tests])
  return [dataclasses.replace(t, size=len(tests), holm=float(h))
          for t, h in zip(tests, adjusted)]


def claim_tests(vs) -> tuple[Pooled, ...]:
  """`sign_test` of the `verdicts.Verdict`s `vs` per contrast, claim and
  reading (`BOTH` first), each family (`PRIMARY`, `NONE`: the contrast's
  claims pooled over both readings) held to Holm over its own tests."""
  out = []
  for kind, family in (("kappa2", PRIMARY), ("none", NONE)):
    tests = []
    for claim in dict.fromkeys(v.claim for v in vs if v.kind == kind):
      mine = [v for v in vs if (v.kind, v.claim) == (kind, claim)
              and np.isfinite(v.test.diff)]
      for reading in (BOTH,) + tuple(run_cells.READINGS):
        cells = [v for v in mine if reading in (BOTH, v.reading)]
        if cells:
          tests.append(sign_test(
              cells, kind=kind, claim=claim, quantity=cells[0].quantity,
              sign=cells[0].test.sign, reading=reading,
              family=family if reading == BOTH else None))
    held = iter(_family([t for t in tests if t.family]))
    out += [next(held) if t.family else t for t in tests]
  return tuple(out)
