r"""rank_collapse: relative residual per layer (Dong et al., Fig. 1).

Architectures: pure SAN, +skip, +MLP, +LN and the full block.

Launch (from the repository root)::

  python launch/run.py --config configs/rank_collapse.py \
      --workdir runs/rank_collapse
  python launch/run.py --config configs/rank_collapse.py:smoke --workdir /tmp/w

The run logs its compile + measure time.

Random-init SANs (L = 24, H = 4, d = 64, T = 32, Gaussian W_Q, W_K, W_V,
W_O, lambda = sqrt(head_dim)) in float64, `num_seeds` weight draws with
`num_sequences` inputs each. Writes `fig_rank_collapse.png` (relative
residual ||res(X^l)|| / ||X^l|| vs l, log y, geometric mean over seeds with
min-max band, one panel per residual definition), `fig_paths.png` (path
length distribution and what each length carries in the skip SAN),
`collapse_curves.csv` (per arch, method, layer), `collapse_fits.csv` (order
of convergence q, column `order`: log r_{l+1} ~ q log r_l + a; Dong's form
log r_l = a + b 3^l; an exponential fit log r_l = a + b l),
`cubic_bound.csv` (the pure SAN against ||res|| <= c ||res||^3) and
`path_lengths.csv`.

Expected (Dong et al.): the pure SAN (and +MLP, +LN) collapse to the
float64 floor within ~4-5 layers with order q ~ 3 (Dong's cubic rate), the
skip and block nets decay with q ~ 1 (at most exponentially, no collapse in
24 layers).

`temperature` = None means lambda = sqrt(head_dim).
"""
import ml_collections
from ml_collections import config_dict

from qkspec.config import args


def get_config(arg=None):
  """Full config; `arg="smoke"` gives a tiny net for tests."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "rank_collapse"
  c.seed = 0                 # PRNG seed: weights and inputs
  c.num_seeds = 5            # independent weight draws (spread in the figure)
  c.num_sequences = 4        # input sequences per weight draw
  c.num_layers = 24          # L
  c.num_heads = 4            # H
  c.dim = 64                 # d, token dimension
  c.head_dim = 16            # D, per-head query/key/value width
  c.mlp_dim = 256            # F, MLP width
  c.seq_len = 32             # T, tokens per sequence
  c.inputs = "gaussian"      # gaussian (i.i.d. N(0,1)) | random_walk
  c.qk_gain = 1.0            # W_Q, W_K scale (1 = fan-in N(0, 1/d))
  c.value_init = "gaussian"  # gaussian | orthogonal | identity (W_V W_O)
  c.temperature = config_dict.placeholder(float)  # lambda; None: sqrt(head_dim)
  c.architectures = ("san", "san_skip", "san_mlp", "san_ln", "block")
  c.methods = ("mean", "svd", "composite")   # residual definitions
  c.composite_steps = 200    # subgradient steps of the composite residual
  c.float64 = True           # run in float64 (floor ~1e-16 instead of ~1e-7)
  c.floor = 1e-14            # relative residuals below this count as collapsed
  c.fit_max_residual = 0.9   # fit only layers with floor < r_l <= this
  if arg.smoke:
    c.num_seeds = 2
    c.num_sequences = 2
    c.num_layers = 4
    c.num_heads = 2
    c.dim = 8
    c.head_dim = 4
    c.mlp_dim = 16
    c.seq_len = 6
    c.composite_steps = 20
  return c
