r"""rho_training: signal propagation probability per iteration, paper Fig. 7.

The locater_wt2 model and data (d = 128, 1 layer, 1 head, T = 64, batch 64,
lr 2.5e-5, 50,000 updates), two members side by side: LocATER with
kappa1 = 100, kappa2 = 1 and no regularization (kappa1 = kappa2 = 0). Every
`log_every` steps the empirical rho_i of the last query (the frequency of
<gamma^i, omega> + gamma_0^i in [0, 1] over the batch, for each key i) is
written; plot_training turns it into rho_heatmap.png (key position vs step).

Launch::

  python launch/train.py --config configs/rho_training.py \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds --workdir /tmp/exp_runs/rho_training
  python launch/plot_training.py --workdir /tmp/exp_runs/rho_training

  python launch/train.py --config configs/rho_training.py:smoke --workdir /tmp/rho_smoke

The fairseq reading of kappa (below)::

  python launch/train.py --config configs/rho_training.py:fairseq \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds \
      --workdir /tmp/exp_runs/rho_training_fairseq

Seeds: `seeds=N` (N > 1) repeats both members with seeds 0..N-1 (zip
mode, 2 N members, named "seed=s,kappa1=..,kappa2=.."), e.g.
configs/rho_training.py:seeds=3,fairseq; launch/report.py compares
no LocATER with LocATER (mean +- std over seeds) and shows the heat maps.
`seed=S` runs both members with seed S alone (one run per seed; the
report merges the runs).

Two readings of kappa (config.locater.penalty_added_to): "mean_loss", the
default, adds kappa * penalty to the mean token cross-entropy as printed;
the `fairseq` argument selects "summed_loss", fairseq's, where the penalty
acts with kappa / 4096 (target tokens per batch) next to the mean loss.
Why they differ: configs/locater_wt2.py and README. `both_readings`
trains the LocATER member under both readings and the no-LocATER member
once (3 members per seed) in one program.

Expected (paper): LocATER shows salient horizontal stripes (a few key
positions with high rho, i.e. localized attention); without it no stripes.
Runtime: about half of locater_wt2 (2 members); smoke: seconds on a CPU.
"""
from qkspec.config import defaults as common


def get_config(arg=None):
  arg = common.parse_arg(arg, smoke=False, fairseq=False,
                         seeds=1, seed=0, both_readings=False)
  c = common.lm_config()
  c.opt.lr = 2.5e-5
  c.num_steps = 50_000
  c.log_every = 250          # heat-map resolution (steps)
  c.eval_every = 2_500
  c.checkpoint_every = 5_000
  # fairseq: kappa / (B * T) next to the mean loss; both_readings: the
  # LocATER member under both readings side by side
  readings = common.readings_of(c, fairseq=arg.fairseq,
                                both_readings=arg.both_readings)
  common.set_seed(c, arg.seed, arg.seeds)
  # member i: (kappa1[i], kappa2[i]), repeated for seeds 0..N-1 (zip)
  common.zip_members(c, [(100.0, 1.0, r) for r in readings]
                     + [(0.0, 0.0, readings[0])], arg.seeds, readings)
  if arg.smoke:
    common.smoke(c)
  return c
