r"""Fig. 7's "salient horizontal stripes" in :math:`\rho_i`, as a test.

Shapes: S = logged training steps, T = key positions.

Fig. 7 draws :math:`\rho_{s,i}` against the step s (x) and key position i
(y): with LocATER some positions keep a high or low :math:`\rho_i` for the
whole run (horizontal stripes); without it :math:`\rho` looks uniform. A
stripe is a position profile that persists over steps, so the statistic is
the spread over positions of the time-averaged profile (a probability),

.. math:: C = \mathrm{std}_i\Big(\frac1S \sum_s \rho_{s,i}\Big).

Step-to-step noise averages out of the profile, and a trend shared by all
positions has no spread over i. The null "no persistent position
structure" permutes the positions independently within every step (each
step keeps its values, only their persistence goes); the p-value is the
fraction of permuted maps whose C reaches the observed one. A map has
stripes when p < `P_VALUE` and C >= `MIN_CONTRAST`.
"""
import numpy as np

P_VALUE = 0.01
MIN_CONTRAST = 0.05


def contrast(rho_SxT: np.ndarray) -> float:
  """C: the std over positions of the step-averaged rho profile."""
  return float(np.std(np.mean(np.asarray(rho_SxT, np.float64), axis=0)))


def stripe_test(rho_SxT, num_permutations: int = 200, seed: int = 0
                ) -> dict:
  """{"contrast", "p_value", "stripes"} of one map, e.g. `l0/rho` values."""
  rho_SxT = np.asarray(rho_SxT, np.float64)
  if rho_SxT.ndim != 2 or min(rho_SxT.shape) < 2:
    raise ValueError(f"rho must be [steps >= 2, positions >= 2], got "
                     f"{rho_SxT.shape}.")
  observed = contrast(rho_SxT)
  rng = np.random.default_rng(seed)
  keys = rng.random((num_permutations,) + rho_SxT.shape)
  permuted = np.take_along_axis(rho_SxT[None], np.argsort(keys, axis=-1),
                                axis=-1)
  null = np.std(np.mean(permuted, axis=1), axis=-1)
  p_value = (1 + np.sum(null >= observed - 1e-12)) / (1 + num_permutations)
  return {"contrast": observed, "p_value": float(p_value),
          "stripes": bool(p_value < P_VALUE and observed >= MIN_CONTRAST)}


def describe(result: dict) -> str:
  """"stripes (C = 0.21, p = 0.005)" or "no stripes (...)"."""
  verdict = "stripes" if result["stripes"] else "no stripes"
  return (f"{verdict} (C = {result['contrast']:.3g}, permutation p = "
          f"{result['p_value']:.3g})")
