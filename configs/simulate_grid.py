r"""simulate_grid: rho_i and attention entropy on a 64 x 64 spectrum grid.

Launch (from the repository root)::

  python launch/run.py --config configs/simulate_grid.py \
      --workdir runs/simulate_grid
  python launch/run.py --config configs/simulate_grid.py:smoke --workdir /tmp/w
  python launch/run.py --config configs/simulate_grid.py \
      --workdir runs/simulate_grid \
      --config.covariances="('isotropic',)" --config.num_eigen_means=32

The run logs its compile and grid time, with a progress line per chunk
of grid points; bench/simulate.py times it.

Fig. 5 of the paper (d = 128, T = 40, 10 W_QK draws, both covariances)
extended from 8 (eigen_mean, eigen_std) pairs to the plane: 64 eigen-means
in [-1, 1] x 64 log-spaced eigen-stds in [0.01, 10], 1,000 random walks per
W_QK draw for rho_i, with the shared (common random numbers) design of
`qkspec.theory.grid_estimator`. The attention entropy (all 40 queries)
uses the first `entropy_sequences` walks: its T x T softmax per (point,
draw, walk) costs T times the rho_i event, and its standard error
(simulate_grid.csv, `entropy_se`) stays small.

Writes fig_grid_localization.png (per covariance: the number of positions
with rho_i > 1/2, the argmax position, max_i rho_i and the entropy; dashed:
the eigen-means where E r = eigen_mean tr(Sigma)/lambda = +-2, Lemma 2's
regime boundary), fig_grid_rho.png (rho_i at `positions`),
simulate_grid.csv|json (one row per covariance and grid point) and
simulate_grid.npz (the arrays). lambda = sqrt(d) unless `temperature` is
set.
"""
import ml_collections
from ml_collections import config_dict

from qkspec.config import args


def get_config(arg=None):
  """Full 64 x 64 grid; `arg="smoke"` gives a tiny grid for tests."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "simulate_grid"
  c.seed = 0                 # PRNG seed: spectra, walks, anisotropic Sigma
  c.dim = 128                # d, token dimension
  c.temperature = config_dict.placeholder(float)  # lambda; None: sqrt(d)
  c.seq_len = 40             # T, tokens per random walk
  c.num_sequences = 1_000    # N, random walks (shared by all draws and points)
  c.entropy_sequences = 32   # E, the first E walks also give the entropy
  c.num_draws = 10           # D, W_QK draws per grid point (shared spectra)
  c.eigen_mean_range = (-1.0, 1.0)  # eigen_mean axis: linspace(low, high, num)
  c.num_eigen_means = 64
  c.eigen_std_range = (0.01, 10.0)  # eigen_std axis: geomspace(low, high, num)
  c.num_eigen_stds = 64
  c.covariances = ("isotropic", "anisotropic")  # Sigma of Assumption 1
  c.aniso_half_width = 2.5   # R_ij ~ Unif(-a, a) of the anisotropic Sigma
  c.positions = (10, 20, 24, 30, 40)  # token positions i drawn as rho_i maps
  c.points_per_chunk = 256   # grid points per jit call (progress, memory)
  if arg.smoke:
    c.dim = 16
    c.seq_len = 8
    c.num_sequences = 64
    c.entropy_sequences = 8
    c.num_draws = 3
    c.num_eigen_means = 5
    c.num_eigen_stds = 4
    c.positions = (4, 8)
    c.points_per_chunk = 8
  return c
