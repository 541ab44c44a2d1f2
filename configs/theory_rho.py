r"""theory_rho: the analytic rho(theta) of Eq. (6), paper Figs. 2-3 and Lemma 2.

Launch (from the repository root)::

  python launch/run.py --config configs/theory_rho.py --workdir runs/theory_rho
  python launch/run.py --config configs/theory_rho.py:smoke --workdir /tmp/w

Writes into the workdir:

* `fig2_paper.png`, `fig2_corrected.png`: Fig. 2 as heat maps, one panel per
  eta, xi on the horizontal and theta = i/T on the vertical axis (as in the
  paper's caption), for the printed and the corrected Lemma 1 variance;
* `fig2_compare.png`: printed / corrected / their difference side by side;
  `fig2_rho.csv|json`: rho on the `xi_values` x `eta_values` x theta grid;
* `fig3_localized.png`, `fig3_rho.csv|json`: Fig. 3, xi = 128 and 512 with
  eta = 0.01, i.e. xi*eta = 1.28 (late site) and 5.12 (middle site, the band
  1/2 <= theta <= 1/2 + 1/5.12). Erratum: the paper's text says eta = 0.02,
  which with xi = 512 would give xi*eta = 10.24, not the stated 5.12; we
  follow the stated products. eta uses lambda, not the lambda^2 of the
  Fig. 2 caption (the derivation gives lambda);
* `lemma2.csv|json`: every case of Lemma 2 under both variants (predicted
  limit, max abs deviation, pass/fail). Case 3 (uniformity) as printed FAILS
  for moderate eta: at xi = 0, rho = erf(1/(eta sqrt(2 c(theta))))/2 still
  depends on theta; only the xi-dependent part of rho' vanishes.
"""
import ml_collections

from qkspec.config import args


def get_config(arg=None):
  """Full config; `arg="smoke"` gives coarse grids for a quick run."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "theory_rho"
  c.num_theta = 401          # points on theta = i/T in [0, 1] (dimensionless)
  c.num_xi = 201             # heat-map columns on xi in [-xi_max, xi_max]
  c.xi_max = 10.0            # heat-map xi range; xi = tr(W)/sqrt(tr(W^2))
  # panels; eta = sqrt(tr(W^2))/lambda
  c.eta_values = (0.001, 0.01, 0.1, 0.5, 1.0, 5.0)
  c.xi_values = (-10.0, -5.0, -1.0, 0.0, 1.0, 5.0, 10.0)  # xi of fig2_rho.csv
  c.variants = ("paper", "corrected")  # Lemma 1 variance: printed / re-derived
  c.localized = ((128.0, 0.01), (512.0, 0.01))  # Fig. 3 (xi, eta) pairs
  c.lemma2 = ml_collections.ConfigDict()
  c.lemma2.xi = 10_000.0     # |xi| standing in for xi -> +-inf (cases 1-2)
  c.lemma2.r_values = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0,       # r = xi*eta =
                       -0.5, -1.0, -2.0, -3.0, -5.0, -10.0)  # tr(W)/lambda
  c.lemma2.exclude = 0.01    # theta distance to a jump left out of the max
  c.lemma2.tol = 1e-3        # pass threshold on |rho - limit| (probability)
  c.lemma2.uniform_etas = (0.1, 1.0, 10.0)   # eta of case 3, xi-part of rho'
  c.lemma2.uniform_xis = (1.0, 0.1, 0.01, 0.001)  # xi -> 0; pass at min
  c.lemma2.zero_xi_etas = (0.001, 0.1, 0.5, 1.0, 10.0, 1000.0)  # |rho'| at xi=0
  c.lemma2.slope_tol = 1e-2  # pass threshold on |rho'| (per unit theta)
  c.lemma2.vanish_xis = (-10.0, -1.0, 0.0, 1.0, 10.0)  # fixed xi of case 4
  c.lemma2.vanish_eta = 10_000.0  # eta standing in for eta -> inf (case 4)
  if arg.smoke:
    c.num_theta = 101
    c.num_xi = 41
    c.eta_values = (0.01, 0.5, 5.0)
    c.xi_values = (-5.0, 0.0, 5.0)
  return c
