r"""rho_training: signal propagation probability per iteration, paper Fig. 7.

The locater_wt2 model and data (d = 128, 1 layer, 1 head, T = 64, batch 64,
lr 2.5e-5, 50,000 updates), two members side by side: LocATER with
kappa1 = 100, kappa2 = 1 and no regularization (kappa1 = kappa2 = 0). Every
`log_every` steps the empirical rho_i of the last query (the frequency of
<gamma^i, omega> + gamma_0^i in [0, 1] over the batch, for each key i) is
written; plot_training draws it as rho_heatmap.png (key position vs step).

Launch (from the repository root; without manual_dir it downloads)::

  python launch/train.py --config configs/rho_training.py \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds --workdir /tmp/exp_runs/rho_training
  python launch/plot_training.py --workdir /tmp/exp_runs/rho_training
  python launch/train.py --config configs/rho_training.py:smoke \
      --workdir /tmp/rho_smoke

On a GPU add `--config.model.kernels=pallas --config.compute_dtype=bfloat16`.
The run logs steps/s, its ETA and wall time; the same command resumes it.

Arguments: `fairseq` (fairseq's reading of kappa, see locater_wt2.py),
`both_readings` (the LocATER member under both, the other once),
`seeds=N` (both members with seeds 0..N-1), `seed=S`, `smoke`;
launch/report.py compares no LocATER with LocATER over seeds.

Expected (paper): LocATER shows salient horizontal stripes (a few key
positions with high rho, i.e. localized attention); without it no stripes.
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
