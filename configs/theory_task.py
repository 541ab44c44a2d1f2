r"""theory_task: the Sec. 2 model on random walks, with and without LocATER.

The embedded default experiment: no data set. A 1-layer single-head model
with a joint W_QK (paper Eqs. 1-2, skip connections, ReLU FFN, no LayerNorm)
learns to predict x_{T+1} from x_1..x_T of an isotropic Gaussian random walk
(Assumption 1) with the squared loss J (optimum 0.5 d = 8). Three members
train side by side in one vmapped step:

* "none": kappa1 = kappa2 = 0;
* the paper's strengths kappa1 = 100, kappa2 = 1, target tr(W_QK) = 1;
* a localizing LocATER: kappa1 = kappa2 = 100, target tr(W_QK) = 12.

Launch (from the repository root)::

  python launch/train.py --config configs/theory_task.py --workdir /tmp/tt
  python launch/plot_training.py --workdir /tmp/tt

  python launch/train.py --config configs/theory_task.py:smoke --workdir /tmp/tt_smoke

Expected runtime: about 40 s on a 2-core CPU (smoke: a few seconds).

What it shows (`rho_heatmap.png`, Fig. 7 style: key position i vs step; the
layer input is exactly Assumption 1, so Lemma 2 applies to layer 0; xi, eta
and r are logged per member as `l0/xi`, `l0/eta`, `l0/r`):

* LocATER drives W_QK towards c I with c = kappa2 target / (kappa1 +
  kappa2 d), the penalty's own minimum
  (`qkspec.theory.locater.penalty_minimum`): the eigen-variance (Eq. 8) collapses while the mean stays
  non-zero, so xi = tr/sqrt(tr W^2) -> sqrt(d) and eta -> c.
* target 12: r = tr(W)/lambda ~ 2.8 > 2 and rho localizes within ~500 steps
  to the middle-site band 1/2 <= theta <= 1/2 + 1/r (Lemma 2 case 1), i.e.
  keys ~16-27 of 32: the bright band of the third panel.
* paper strengths (target 1): kappa1 dominates, c = 1/116, r ~ 0.03, and at
  T = 32 every u_i stays in [0, 1]: rho = 1 at every position (the
  finite-T edge 1/2 - 1/(rT) of Lemma 2's late-site band lies below 0).
* none: tr(W_QK) drifts negative (attending to early, small-norm tokens
  shrinks the attention output, which the optimal predictor x_T does not
  need) with a large eigen-variance: a blurred early-site pattern.
"""
from qkspec.config import defaults as common


def get_config(arg=None):
  arg = common.parse_arg(arg, smoke=False)
  c = common.theory_config()
  c.opt.lr = 1e-3            # Adam learning rate (constant)
  c.num_steps = 3_000        # updates
  c.log_every = 25           # heat-map resolution (steps)
  c.eval_every = 500
  c.checkpoint_every = 1_000
  c.sweep.mode = "zip"       # member i: (kappa1[i], kappa2[i], target[i])
  c.sweep.kappa1 = (0.0, 100.0, 100.0)
  c.sweep.kappa2 = (0.0, 1.0, 100.0)
  c.sweep.target = (1.0, 1.0, 12.0)
  if arg.smoke:
    common.smoke(c, d_model=8)
  return c
