r"""spectrum_collapse: rank collapse, entropy and rho in deep pure SANs.

Over a grid of (eigen_mean, eigen_std).

Launch (from the repository root)::

  python launch/run.py --config configs/spectrum_collapse.py \
      --workdir runs/spectrum_collapse
  python launch/run.py --config configs/spectrum_collapse.py:smoke \
      --workdir /tmp/w

The run logs a progress line per chunk of grid points and the sweep time.

Every layer's W_QK is drawn by `spectrum.sample_qk(eigen_mean, eigen_std)`
(W_QK = B diag(w) B^T, w_i ~ N(eigen_mean, eigen_std^2)), W_V is
Haar-orthogonal (so only the attention mixes tokens), single head, no
skip/MLP/LN, lambda = sqrt(d) (`temperature` = None), random-walk inputs
(Assumption 1, Sigma = I) as in the paper's Fig. 5. Per (eigen_mean,
eigen_std): relative residual per layer (mean-centring, float32 floor
~1e-7), attention entropy per layer, rho_i of the last query per layer, and
the fraction of attention rows under the Eq. (9) curve and Zhai's bound.
Writes `fig_spectrum_collapse.png` (heat maps over the grid),
`fig_spectrum_layers.png` (per-layer curves), `fig_spectrum_rho.png` and
`spectrum_grid.csv`, `spectrum_layers.csv`, `spectrum_rho.csv`,
`spectrum_claims.csv` (the paper's Sec. 5 claims, checked).
"""
import ml_collections
from ml_collections import config_dict

from qkspec.config import args


def get_config(arg=None):
  """Full config; `arg="smoke"` gives a 2x2 grid on a tiny net."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "spectrum_collapse"
  c.seed = 0                 # PRNG seed: W_QK, W_V draws and inputs
  c.dim = 64                 # d, token dimension
  c.temperature = config_dict.placeholder(float)  # lambda; None: sqrt(d)
  c.seq_len = 32             # T
  c.num_layers = 24          # L
  c.num_heads = 1            # H (the paper's single head)
  c.num_draws = 4            # weight draws per grid point
  c.num_sequences = 16       # random walks per draw
  c.eigen_means = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0)  # mean of w_i
  c.eigen_stds = (0.003, 0.01, 0.03, 0.1, 0.3)      # std of w_i
  c.inputs = "random_walk"   # random_walk (Assumption 1) | gaussian
  c.value_init = "orthogonal"  # orthogonal | identity | gaussian
  c.collapse_threshold = 1e-3  # collapse depth: first l with r_l below this
  c.points_per_batch = 2     # grid points vmapped per call (memory)
  if arg.smoke:
    c.dim = 8
    c.seq_len = 6
    c.num_layers = 3
    c.num_draws = 2
    c.num_sequences = 4
    c.eigen_means = (0.0, 0.3)
    c.eigen_stds = (0.01, 0.3)
    c.points_per_batch = 2
  return c
