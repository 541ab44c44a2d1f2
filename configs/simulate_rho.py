r"""simulate_rho: Monte Carlo rho_i and attention entropy, paper Fig. 5.

Launch (from the repository root)::

  python launch/run.py --config configs/simulate_rho.py --workdir runs/simulate_rho
  python launch/run.py --config configs/simulate_rho.py:smoke --workdir /tmp/w
  python launch/run.py --config configs/simulate_rho.py --workdir runs/simulate_rho \
      --config.num_draws=3 --config.pairs="((0.0, 0.1), (0.5, 0.01))" \
      --config.regimes="('uniform', 'middle-site')"
  python launch/run.py --config configs/simulate_rho.py --workdir runs/simulate_rho \
      --config.design=fresh      # the paper's procedure read literally

Expected runtime on a 2-core CPU shared with a training job, with
OPENBLAS_NUM_THREADS=1: design "shared" (default): jit compile ~9 s, sweep
~0.2 s, figures a few s; design "fresh": compile ~13 s, sweep ~13 s.
bench/simulate.py times both against a NumPy reference.

Sampling design (`design`, see qkspec/theory/grid_estimator.py): "shared" reuses one
set of N walks and one spectrum (B_k, z_k) per draw index k across all pairs
and both covariances (common random numbers): every pair's estimate is
unbiased, with standard errors from the crossed draw x walk design
(`rho_mc_se`, `entropy_se` in the tables). Because the walks are not
renewed per draw, these errors are larger than the fresh design's at the
same N and D where the walk-to-walk variation dominates (about 1.8x for
rho_i and 3x for the entropy at the median, bench/simulate.py).

As in the paper: d = 128, T = 40, 300 random walks, 10 W_QK draws per
(eigen_mean, eigen_std) pair, W_QK = B diag(w) B^T with
w_i ~ N(eigen_mean, eigen_std^2) (the paper calls them the "mean" and
"scale" of the eigenvalues), for the isotropic Sigma = I and one
anisotropic Sigma = R^T R / d, R_ij ~ Unif(-2.5, 2.5), drawn from `seed`;
lambda = sqrt(d) (`temperature` = None).

The pairs below are (eigen_mean, eigen_std).

Regimes, checked in simulate_pairs.csv (isotropic Sigma: r = tr(W)/lambda
~ sqrt(d) eigen_mean = 11.3 eigen_mean, eta = sqrt(tr(W^2))/lambda ~
sqrt(eigen_mean^2 + eigen_std^2); the anisotropic Sigma has E Sigma =
(2.5^2/3) I and roughly doubles r and eta):

* (0, 0.1), (0, 1): uniform (xi ~ 0 on average; each draw has xi ~ N(0, 1),
  so single draws tilt). The mean rho_i is flat-ish: ~0.6-0.8 for
  eigen_std 0.1, not the 1/2 of Eq. (6), because at T = 40 the 1/T mean of
  u_i (an o(1) term of Lemma 1) is not small against its spread eta ~ 0.1;
  ~0.35-0.6 for eigen_std 1.
* (0.1, 0.01): late site, r ~ 1.1 (<= 2): rho_i ~ 1{i/T >= 1/2}. With the
  anisotropic Sigma r ~ 2.4, so it becomes a wide middle-site band.
* (-0.1, 0.01): early site, r ~ -1.1: the mirror image, 1{i/T <= 1/2}.
* (0.5, 0.01), (1.0, 0.01): middle site, r ~ 5.7 and 11.3 (> 2): rho_i
  concentrates on 1/2 <= i/T <= 1/2 + 1/r (a band of ~7 and ~4 tokens).
* (0.5, 5), (0, 20): vanishing, eta ~ 5 and 20: rho_i <= ~0.25 and ~0.07.
  (0.5, 5) against (0.5, 0.01) shows the middle-site band dissolving as
  eigen_std grows at a fixed eigen_mean.

The right panels show the attention entropy: at a fixed eigen_mean it falls
as eigen_std grows. The run logs, per covariance, the max and mean abs
error of the printed, corrected and exact-moment Gaussian approximations of
Lemma 1 against the Monte Carlo rho (mean over draws); see
simulate_errors.csv.
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
