r"""Fig. 7's "salient horizontal stripes" in :math:`\rho_i`, as a test.

Shapes: S = logged training steps, T = key positions, N = T - 2.

Each inner position is set against the line through its neighbours,

.. math:: d_{s,i} = \rho_{s,i} - \tfrac12(\rho_{s,i-1} + \rho_{s,i+1}),
   \qquad D = \max_i \Big|\frac1S \sum_s d_{s,i}\Big|,

zero for a linear trend and small for a smooth one; averaging over steps
removes noise and spikes that move. The null shifts each step's
departures circularly by its own random offset (keeping their correlation
between neighbours, removing their alignment across steps); the p-value is
the fraction of shifted maps whose D reaches the observed one. Stripes:
p < `P_VALUE` and D >= `MIN_DEPARTURE` = 0.1, a tenth of the range [0, 1]
that rho_i (a probability) can take, the heat map's colour scale: absolute,
not a tenth of the map's own max - min, which would call a faint pattern
on an otherwise flat map "salient" however little it stands out.
A record may keep an earlier test's result instead (`earlier_result`):
the spread over positions of the time-averaged profile, which counts
smooth trends too.

Fig. 7's claim per reading (`stripe_verdicts`): "reproduced" when every
LocATER map has stripes and no map without LocATER does, "reversed" for
the opposite, else "not reproduced". The earlier test calls a smooth
gradient stripes too, so on its results the claim is `UNDECIDED` unless a
LocATER map shows none.
"""
import dataclasses

import numpy as np

from qkspec.records import rundir
from qkspec.report import run_cells

P_VALUE = 0.01
MIN_DEPARTURE = 0.1        # of rho's range [0, 1], not of the map's own
RULE = (f"shift test p < {P_VALUE:g} and departure D >= "
        f"{MIN_DEPARTURE:g}")
EARLIER_RULE = "permutation p < 0.01 and contrast C >= 0.05"
UNDECIDED = "undetermined from the records"


def departures(rho_SxT: np.ndarray) -> np.ndarray:
  """d_SxN: each inner position's rho less the mean of its neighbours'."""
  rho_SxT = np.asarray(rho_SxT, np.float64)
  return rho_SxT[:, 1:-1] - 0.5 * (rho_SxT[:, :-2] + rho_SxT[:, 2:])


def stripe_test(rho_SxT, num_shifts: int = 200, seed: int = 0
                ) -> dict:
  """{"departure": D, "position" (1-based), "p_value", "stripes"} of one
  map; `num_shifts` shifted maps make the null."""
  rho_SxT = np.asarray(rho_SxT, np.float64)
  if rho_SxT.ndim != 2 or rho_SxT.shape[0] < 2 or rho_SxT.shape[1] < 3:
    raise ValueError(f"rho must be [steps >= 2, positions >= 3], got "
                     f"{rho_SxT.shape}.")
  d_SxN = departures(rho_SxT)
  profile_N = np.abs(np.mean(d_SxN, axis=0))    # persistent departures
  observed = float(np.max(profile_N))
  S, N = d_SxN.shape
  shifts_BxS = np.random.default_rng(seed).integers(0, N,
                                                    (num_shifts, S))
  shifted = np.take_along_axis(
      d_SxN[None], (np.arange(N) + shifts_BxS[..., None]) % N, axis=-1)
  null = np.max(np.abs(np.mean(shifted, axis=-2)), axis=-1)     # D of each
  p_value = (1 + np.sum(null >= observed - 1e-12)) / (1 + num_shifts)
  position = int(np.argmax(profile_N)) + 2       # 1-based, inner positions
  return {"departure": observed, "position": position,
          "p_value": float(p_value),
          "stripes": bool(p_value < P_VALUE and observed >= MIN_DEPARTURE)}


def earlier_result(result: dict) -> bool:
  """Is `result` the earlier test's (contrast C), kept by a record?"""
  return "contrast" in result


def describe(result: dict) -> str:
  """"stripes (D = 0.31 at key 12, shift test p = 0.005)" or "no stripes
  (...)"; an `earlier` result with its C and permutation p."""
  verdict = "stripes" if result["stripes"] else "no stripes"
  what = (f"C = {result['contrast']:.3g}, permutation"
          if earlier_result(result)
          else f"D = {result['departure']:.3g} at key {result['position']}, "
          "shift test")
  return f"{verdict} ({what} p = {result['p_value']:.3g})"


def _result(member):
  """`stripe_test` of the member's layer-0 rho map, else the result its
  record kept, or None."""
  key = next((k for k in rundir.rho_keys(0) if k in member["metrics"]), None)
  if key is None or len(member["metrics"][key][0]) < 2:
    return member.get("stripes")
  return stripe_test(member["metrics"][key][1])


def results(runs) -> dict:
  """member key -> its stripe result (`_result`), over Fig. 7's runs, each
  map tested once."""
  return {m["key"]: r for run in runs if run.figure == "7"
          and run.shared_from is None for m in run.members
          if (r := _result(m)) is not None}


@dataclasses.dataclass(frozen=True)
class StripeVerdict:
  """Fig. 7's claim on one reading's maps."""
  label: str
  reading: str
  verdict: str
  locater: tuple[int, int]     # (LocATER maps, with stripes)
  without: tuple[int, int]     # (maps without LocATER, with stripes)
  kept: bool                   # a record kept results, not maps
  earlier: bool                # some result is the earlier test's
  steps: int
  p_values: tuple[float, ...]


def _verdict(locater, without, earlier: bool) -> str:
  (n1, s1), (n0, s0) = locater, without
  if earlier:                  # its stripes may be a gradient
    return UNDECIDED if s1 == n1 else "not reproduced"
  if s1 == n1 and s0 == 0:
    return "reproduced"
  return "reversed" if s1 == 0 and s0 == n0 else "not reproduced"


def stripe_verdicts(cells, found) -> tuple[StripeVerdict, ...]:
  """Fig. 7's claim per cell (`run_cells.cells`) from the stripe results
  `found` (`results`); none where a cell lacks either kind of map."""
  out = []
  for (label, reading), cell in cells.items():
    if cell.figure != "7":
      continue
    tested = [(m, found[m["key"]]) for m in cell.counted if m["key"] in found]
    maps = {k: [r["stripes"] for m, r in tested
                if run_cells.is_locater(m) == k] for k in (True, False)}
    if not (maps[True] and maps[False]):
      continue
    locater, without = [(len(maps[k]), sum(maps[k])) for k in (True, False)]
    earlier = any(earlier_result(r) for _, r in tested)
    out.append(StripeVerdict(
        label=label, reading=reading,
        verdict=_verdict(locater, without, earlier), locater=locater,
        without=without, earlier=earlier,
        kept=any(not any(k in m["metrics"] for k in rundir.rho_keys(0))
                 for m in cell.counted),
        steps=max(m["last_step"] for m in cell.counted),
        p_values=tuple(r["p_value"] for _, r in tested)))
  return tuple(out)
