r"""Summaries shared by the collapse and entropy experiments.

`collapse_depth` (`rank_collapse`, `spectrum_collapse`); `entropy_curves`
and `below`: Eq. (9) and Zhai's Theorem 3.1, and whether an entropy falls
below a curve by more than `BOUND_TOL` (`entropy_check`,
`spectrum_collapse`).
"""
import jax
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import entropy_bounds

BOUND_TOL = 1e-4   # nats: a row is "below" a curve only below curve - BOUND_TOL


def collapse_depth(r_K: np.ndarray, threshold: float) -> int:
  """First layer l with r_l < threshold; len(r_K) (= L+1) if none (also on
  any increasing map of both, e.g. log10)."""
  below_K = np.nonzero(np.asarray(r_K) < threshold)[0]
  return int(below_K[0]) if below_K.size else len(r_K)


def entropy_curves(nu: jax.Array, temperature: float,
                   seq_len: int) -> dict[str, jax.Array]:
  r"""Eq. (9) and Zhai's bound at :math:`\nu` and at :math:`\nu\lambda`.

  `nu`: `entropy_bounds.entropy_bound_nu`. Returns `eq9`, `eq9_raw`,
  `zhai`, `zhai_raw` (the `_raw` at the paper's un-normalised
  :math:`\nu\lambda`), each shaped like `nu`.
  """
  raw = nu * temperature     # the paper's nu, without the 1/lambda
  return dict(
      eq9=diagnostics.eq9_entropy(nu, seq_len),
      eq9_raw=diagnostics.eq9_entropy(raw, seq_len),
      zhai=entropy_bounds.zhai_entropy_lower_bound(nu, seq_len),
      zhai_raw=entropy_bounds.zhai_entropy_lower_bound(raw, seq_len))


def below(entropy: jax.Array, curve: jax.Array) -> jax.Array:
  """True where `entropy` is below `curve` by more than `BOUND_TOL` nats."""
  return entropy < curve - BOUND_TOL
