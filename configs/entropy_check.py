r"""entropy_check: measured attention entropy vs Eq. (9) and Zhai's Theorem 3.1.

Launch (from the repository root)::

  python launch/run.py --config configs/entropy_check.py \
      --workdir runs/entropy_check
  python launch/run.py --config configs/entropy_check.py:smoke --workdir /tmp/w

The run logs its compile + sweep time.

One attention layer A = softmax(X W_QK X^T / lambda), lambda = sqrt(d)
(`temperature` = None), on random-walk and i.i.d. Gaussian token inputs,
with W_QK either a Gaussian matrix rescaled to spectral norm `qk_norms[k]`
or `sample_qk(eigen_mean, eigen_std)` for each of `pairs`. Every attention
row's entropy is compared with the Eq. (9) curve (`diagnostics.eq9_entropy`)
and Zhai's bound (`entropy_bounds.zhai_entropy_lower_bound`) at
nu = ||XX^T||_2 ||W_QK||_2 / lambda, and at the un-normalised nu * lambda.
Writes
`fig_entropy_check.png`, `entropy_check.csv` (per setting) and
`entropy_check_summary.csv` (violations per bound and input).

Expected result: Zhai's bound is never violated (it is a theorem, and
tight); Eq. (9) as printed is violated by every row at small nu (where it
exceeds ln T) and by many rows at moderate nu.
"""
import ml_collections
from ml_collections import config_dict

from qkspec.config import args


def get_config(arg=None):
  """Full config; `arg="smoke"` gives a tiny sweep."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "entropy_check"
  c.seed = 0                 # PRNG seed: W_QK draws and inputs
  c.dim = 64                 # d, token dimension
  c.temperature = config_dict.placeholder(float)  # lambda; None: sqrt(d)
  c.seq_len = 32             # T, keys per attention row
  c.num_sequences = 32       # N, input sequences per draw
  c.num_draws = 4            # W_QK draws per setting
  c.inputs = ("random_walk", "gaussian")   # token inputs
  c.qk_norms = tuple(float(10.0**e) for e in
                     (-6, -5.5, -5, -4.5, -4, -3.5, -3, -2.5, -2, -1.5, -1,
                      -0.5, 0, 0.5, 1))   # ||W_QK||_2 of the Gaussian W_QK
  c.pairs = ((0.0, 0.01), (0.0, 0.1), (0.0, 1.0), (0.1, 0.01), (0.5, 0.01),
             (1.0, 0.01), (0.5, 0.5))     # (eigen_mean, eigen_std)
  if arg.smoke:
    c.dim = 8
    c.seq_len = 6
    c.num_sequences = 4
    c.num_draws = 2
    c.qk_norms = (1e-3, 1e-1, 10.0)
    c.pairs = ((0.0, 0.1), (0.5, 0.01))
  return c
