r"""Fig. 7's "salient horizontal stripes" in :math:`\rho_i`, as a test.

Shapes: S = logged training steps, T = key positions.

The paper's Fig. 7 shows :math:`\rho_{s,i}` (colour) against the training
step s (x) and the key position i (y): with LocATER some positions keep a
high or low :math:`\rho_i` for the whole run (horizontal stripes); without
it :math:`\rho` looks uniform. A stripe is a *position profile that persists
over steps*, so the statistic is the spread over positions of the
time-averaged profile,

.. math:: C = \mathrm{std}_i\Big(\frac1S \sum_s \rho_{s,i}\Big),

in units of probability. Noise that is independent from step to step
averages out of the profile; a trend shared by all positions has no spread
over i. The null hypothesis "no persistent position structure" is tested by
permuting the positions independently within every step (which keeps each
step's values and destroys only their persistence): the p-value is the
fraction of `num_permutations` permuted maps whose C reaches the observed
one. A map has stripes when the profile is both persistent
(p < `P_VALUE`) and salient (C >= `MIN_CONTRAST`: the positions' average
:math:`\rho_i` differ by several hundredths at least).
"""
import numpy as np

P_VALUE = 0.01
MIN_CONTRAST = 0.05


def contrast(rho_SxT: np.ndarray) -> float:
  """C: the std over positions of the step-averaged rho profile."""
  return float(np.std(np.mean(np.asarray(rho_SxT, np.float64), axis=0)))


def stripe_test(rho_SxT, num_permutations: int = 200, seed: int = 0
                ) -> dict:
  """{"contrast", "p_value", "stripes"} of one rho-over-training map.

  Args:
    rho_SxT: rho_i at S logged steps (rows) and T key positions (columns),
      e.g. `metrics["l0/rho"][1]` of a training run.
    num_permutations: permuted maps for the null distribution.
    seed: of the permutations.
  """
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
