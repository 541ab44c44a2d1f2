r"""Summaries shared by the collapse and entropy experiments.

`collapse_depth` (`rank_collapse`, `spectrum_collapse`); `entropy_curves`
and `below`: Eq. (9) and Zhai's Theorem 3.1 at :math:`\nu` and at the
un-normalised :math:`\nu\lambda`, and whether a row's entropy falls below a
curve by more than `BOUND_TOL` (`entropy_check`, `spectrum_collapse`).
"""
import jax
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import entropy_bounds

BOUND_TOL = 1e-4   # nats: a row is "below" a curve only below curve - BOUND_TOL


def collapse_depth(r_K: np.ndarray, threshold: float) -> int:
  """First layer l with r_l < threshold; len(r_K) (= L+1) if none.

  Any increasing map of both sides gives the same depth, e.g.
  `collapse_depth(log10_r_K, np.log10(threshold))`.
  """
  below_K = np.nonzero(np.asarray(r_K) < threshold)[0]
  return int(below_K[0]) if below_K.size else len(r_K)


def entropy_curves(nu: jax.Array, temperature: float,
                   seq_len: int) -> dict[str, jax.Array]:
  r"""Eq. (9) and Zhai's bound at :math:`\nu` and at :math:`\nu\lambda`.

  `nu` is :math:`\|XX^\top\|_2\|W_{QK}\|_2/\lambda`
  (`entropy_bounds.entropy_bound_nu`), `seq_len` the keys per row. Returns
  `eq9`, `eq9_raw` (`diagnostics.eq9_entropy` at nu and nu * lambda) and
  `zhai`, `zhai_raw` (Zhai et al.'s Theorem 3.1), each shaped like `nu`.
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
