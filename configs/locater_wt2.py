r"""locater_wt2: LocATER on WikiText-2, the kappa2 sweep of paper Fig. 6.

fairseq's transformer_lm as in Sec. 7: d = 128 (embedding = attention =
FFN), 1 layer, 1 head, Post-LN, ReLU, dropout 0.1, sinusoidal positions,
untied output; T = 64, batch 64; AdamW(0.9, 0.999, 1e-8, weight decay
0.01), constant lr 2.5e-5, no clipping, 50,000 updates; kappa1 = 100,
kappa2 in {0, 1e-3, 1e-2, 1e-1, 1}, target tr(W_QK) = 1. The five members
train side by side in one vmapped, jit-compiled step.

Launch (from the repository root; without manual_dir it downloads)::

  python launch/train.py --config configs/locater_wt2.py \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds --workdir /tmp/exp_runs/locater_wt2
  python launch/plot_training.py --workdir /tmp/exp_runs/locater_wt2
  python launch/train.py --config configs/locater_wt2.py:smoke --workdir /tmp/w

On a GPU add `--config.model.kernels=pallas --config.compute_dtype=bfloat16`
(`bench/gpu_figures.py`). The same command resumes the run.

Arguments (e.g. `locater_wt2.py:seeds=3,fairseq`): `fairseq`, fairseq's
reading of kappa (the penalty next to the summed loss, i.e. kappa / 4096
next to the mean; default: next to the mean loss, as printed);
`both_readings`, both side by side; `seeds=N`, seeds 0..N-1 in one program;
`seed=S`, seed S alone; `contrast`, a no-LocATER member per seed; `none`,
that member alone; `kappa2=10,100,1000`, these kappa2; `smoke`, a CPU run.

Expected (paper): stronger kappa2 shrinks tr(W_QK^T W_QK) (Fig. 6B), keeps
the attention entropy higher (6C) and lowers valid perplexity (6D):
fig6_*.png. qkspec finds otherwise (README, REPRODUCTION.md).
"""
from qkspec.config import defaults as common


def get_config(arg=None):
  arg = common.parse_arg(arg, smoke=False, fairseq=False,
                         seeds=1, contrast=False, seed=0,
                         none=False, both_readings=False,
                         kappa2=common.KAPPA2_SWEEP)
  c = common.lm_config()
  c.opt.lr = 2.5e-5          # constant (paper, d = 128)
  c.num_steps = 50_000       # updates (paper)
  c.log_every = 250          # steps between measurements (rho, entropy, ...)
  c.eval_every = 2_500       # steps between valid/test perplexity
  c.checkpoint_every = 5_000
  c.locater.kappa1 = 100.0   # fixed scale strength (paper)
  c.locater.target = 1.0     # tr(W_QK) target (paper)
  c.sweep.kappa2 = tuple(arg.kappa2)   # the paper's, or kappa2=a,b,...
  common.wikitext2_variant(c, fairseq=arg.fairseq, seeds=arg.seeds,
                           contrast=arg.contrast, seed=arg.seed,
                           none=arg.none, both_readings=arg.both_readings)
  if arg.smoke:
    common.smoke(c)
  return c


def get_sweep():
  """The same sweep as plain override dicts (one per member)."""
  return [{"locater.kappa2": k} for k in common.KAPPA2_SWEEP]
