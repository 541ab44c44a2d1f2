r"""theory_task: the Sec. 2 model on random walks, with and without LocATER.

No data set: a 1-layer single-head model with a joint W_QK (paper Eqs.
1-2, skip connections, ReLU FFN, no LayerNorm) learns to predict x_{T+1}
from x_1..x_T of an isotropic Gaussian random walk (Assumption 1) with the
squared loss (optimum 0.5 d = 8). Three members train side by side:
"none" (kappa1 = kappa2 = 0); the paper's kappa1 = 100, kappa2 = 1, target
tr(W_QK) = 1; and a localizing kappa1 = kappa2 = 100, target 12.

Launch (from the repository root)::

  python launch/train.py --config configs/theory_task.py --workdir /tmp/tt
  python launch/plot_training.py --workdir /tmp/tt
  python launch/train.py --config configs/theory_task.py:smoke \
      --workdir /tmp/tt_smoke

The run logs steps/s, its ETA and wall time (a CPU suffices).

Expected (`rho_heatmap.png`, key position vs step; `l0/xi`, `l0/eta`, `l0/r`
in metrics.jsonl): LocATER drives W_QK towards c I, c = kappa2 target /
(kappa1 + kappa2 d), the penalty's minimum
(`qkspec.theory.locater.penalty_minimum`). Target 12: r = tr(W)/lambda
~ 2.8 > 2, and rho localizes to the middle-site band 1/2 <= theta <= 1/2 +
1/r (Lemma 2), keys ~16-27 of 32. Target 1: c = 1/116, r ~ 0.03, every u_i
stays in [0, 1] and rho = 1 everywhere. None: tr(W_QK) drifts negative with
a large eigen-variance, a blurred early-site pattern.
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
