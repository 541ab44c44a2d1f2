r"""simulate_rho: Monte Carlo rho_i and attention entropy, paper Fig. 5.

Launch (from the repository root)::

  python launch/run.py --config configs/simulate_rho.py \
      --workdir runs/simulate_rho
  python launch/run.py --config configs/simulate_rho.py:smoke --workdir /tmp/w
  python launch/run.py --config configs/simulate_rho.py \
      --workdir runs/simulate_rho --config.design=fresh  # read literally

The run logs its compile + sweep time; bench/simulate.py times both designs
against a NumPy reference.

As in the paper: d = 128, T = 40, 300 random walks, 10 W_QK draws per
(eigen_mean, eigen_std) pair, W_QK = B diag(w) B^T with w_i ~
N(eigen_mean, eigen_std^2) (the paper's "mean" and "scale" of the
eigenvalues), for Sigma = I and one anisotropic Sigma = R^T R / d,
R_ij ~ Unif(-2.5, 2.5), drawn from `seed`; lambda = sqrt(d) (`temperature`
= None). Design "shared" (default) reuses one set of walks and one
spectrum per draw index across all pairs (common random numbers, with
standard errors of the crossed design); "fresh" draws them per pair.

Writes fig5_simulation.png, fig5_gaussian_vs_mc.png, simulate_rho.csv (per
position), simulate_pairs.csv (per pair: regime, r, xi, eta, entropy) and
simulate_errors.csv (Lemma 1's Gaussian approximations against Monte Carlo).

Expected (paper, Lemma 2; qkspec/experiments/simulate_rho.py): uniform for
eigen_mean 0; late site for (0.1, 0.01), early for (-0.1, 0.01); a middle
band for (0.5, 0.01) and (1, 0.01); vanishing for (0.5, 5) and (0, 20). At
a fixed eigen_mean the entropy falls as eigen_std grows.
"""
import ml_collections
from ml_collections import config_dict

from qkspec.config import args


def get_config(arg=None):
  """Full Fig. 5 config; `arg="smoke"` gives a tiny sweep for tests."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "simulate_rho"
  c.seed = 0                 # PRNG seed: W_QK draws, walks, anisotropic Sigma
  c.dim = 128                # d, token dimension
  c.temperature = config_dict.placeholder(float)  # lambda; None: sqrt(d)
  c.seq_len = 40             # T, tokens per random walk
  c.num_sequences = 300      # N, random walks per W_QK draw
  c.num_draws = 10           # W_QK draws per (eigen_mean, eigen_std) pair
  c.pairs = ((0.0, 0.1), (0.0, 1.0), (0.1, 0.01), (-0.1, 0.01), (0.5, 0.01),
             (1.0, 0.01), (0.5, 5.0), (0.0, 20.0))  # (eigen_mean, eigen_std)
  c.regimes = ("uniform", "uniform", "late-site", "early-site", "middle-site",
               "middle-site", "vanishing", "vanishing")  # label per pair
  c.covariances = ("isotropic", "anisotropic")  # Sigma of Assumption 1
  c.aniso_half_width = 2.5   # R_ij ~ Unif(-a, a) of the anisotropic Sigma
  c.design = "shared"        # "shared": common random numbers (sweep_fast);
                             # "fresh": new W_QK and walks per pair and draw
  c.entropy_sequences = 0    # shared design: walks for the entropy (0: all N)
  c.cells_per_batch = 4      # fresh design: (cov, pair) cells vmapped at once
  if arg.smoke:
    c.dim = 16
    c.seq_len = 8
    c.num_sequences = 64
    c.num_draws = 2
    c.pairs = ((0.0, 1.0), (0.5, 0.01), (0.0, 5.0))
    c.regimes = ("uniform", "middle-site", "vanishing")
    c.cells_per_batch = 2
  return c
