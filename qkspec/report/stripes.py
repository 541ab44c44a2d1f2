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
A record may keep an `earlier` test's result instead: the spread over
positions of the time-averaged profile, which counts smooth trends too.
"""
import numpy as np

P_VALUE = 0.01
MIN_DEPARTURE = 0.1        # of rho's range [0, 1], not of the map's own
RULE = (f"shift test p < {P_VALUE:g} and departure D >= "
        f"{MIN_DEPARTURE:g}")
EARLIER_RULE = "permutation p < 0.01 and contrast C >= 0.05"


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


def earlier(result: dict) -> bool:
  """Is `result` the earlier test's (contrast C), kept by a record?"""
  return "contrast" in result


def describe(result: dict) -> str:
  """"stripes (D = 0.31 at key 12, shift test p = 0.005)" or "no stripes
  (...)"; an `earlier` result with its C and permutation p."""
  verdict = "stripes" if result["stripes"] else "no stripes"
  what = (f"C = {result['contrast']:.3g}, permutation" if earlier(result)
          else f"D = {result['departure']:.3g} at key {result['position']}, "
          "shift test")
  return f"{verdict} ({what} p = {result['p_value']:.3g})"
