r"""entropy_bound: the Eq. (9) curve vs nu, paper Fig. 4.

The paper prints Eq. (9) as a lower bound on the attention entropy.

Launch (from the repository root)::

  python launch/run.py --config configs/entropy_bound.py \
      --workdir runs/entropy_bound
  python launch/run.py --config configs/entropy_bound.py:smoke --workdir /tmp/w

Writes `fig4_entropy_bound.png` (the Eq. (9) curve vs nu for each T with
ln T dashed, and curve / ln T), `entropy_bound.csv|json` (the curves) and
`entropy_bound_summary.csv|json` (per T: the value at nu = 0, which is
ln(1+T) > ln T, the peak, and the nu interval where the curve exceeds the
maximum entropy ln T, so cannot bound the entropy there; the `bound*`
columns hold the Eq. (9) curve).
"""
import ml_collections

from qkspec.config import args


def get_config(arg=None):
  """Full config; `arg="smoke"` gives a coarse nu grid and two T."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "entropy_bound"
  c.nu_max = 30.0            # right end of the nu grid (dimensionless)
  c.num_nu = 3001            # points on nu in [0, nu_max]
  c.seq_lens = (16, 64, 256, 1024)  # T, number of keys per attention row
  if arg.smoke:
    c.num_nu = 301
    c.seq_lens = (16, 256)
  return c
