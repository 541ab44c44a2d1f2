r"""depth_width: the kappa2 sweep at other depths and widths, paper App. D.

L in {1, 3, 6} decoder layers x d in {32, 128} (embedding = attention = FFN
= d), otherwise as locater_wt2 (Fig. 6): kappa1 = 100, kappa2 in
{0, 1e-3, 1e-2, 1e-1, 1}, T = 64, batch 64, 50,000 updates, lr 2.5e-5 for
d = 128 and 1e-4 for d = 32. The config argument selects the cell:

  Fig. 8  :L=1,d=32     Fig. 9  :L=3,d=32     Fig. 10 :L=6,d=32
  Fig. 6  :L=1,d=128    Fig. 11 :L=3,d=128    Fig. 12 :L=6,d=128

Launch (from the repository root; without manual_dir it downloads)::

  python launch/train.py --config configs/depth_width.py:L=3,d=32 \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds \
      --workdir /tmp/exp_runs/depth_width_L3_d32
  python launch/plot_training.py --workdir /tmp/exp_runs/depth_width_L3_d32
  python launch/train.py --config configs/depth_width.py:L=3,d=32,smoke \
      --workdir /tmp/dw_smoke

On a GPU add `--config.model.kernels=pallas --config.compute_dtype=bfloat16`
(`python bench/gpu_figures.py` trains Figs. 6 and 8-12). The run logs
steps/s, its ETA and wall time; the same command resumes it.

The other arguments are locater_wt2's (`fairseq`, `both_readings`,
`seeds=N`, `seed=S`, `contrast`, `none`, `kappa2=A,B,...`, `smoke`), e.g.
`depth_width.py:L=3,d=32,both_readings,seeds=3,contrast`.

Expected (paper): the Fig. 6 trends at every depth and width. The panels
average the layers; per-layer values are in metrics.jsonl (l{layer}/...).
"""
from qkspec.config import ConfigError
from qkspec.config import defaults as common

PAPER_LR = {32: 1e-4, 128: 2.5e-5}   # App. D


def get_config(arg=None):
  arg = common.parse_arg(arg, L=1, d=128, smoke=False, fairseq=False,
                         seeds=1, contrast=False, seed=0,
                         none=False, both_readings=False,
                         kappa2=common.KAPPA2_SWEEP)
  if arg.L not in (1, 3, 6) or arg.d not in PAPER_LR:
    raise ConfigError(f"depth_width: L must be 1, 3 or 6 and d 32 or 128, "
                      f"got L={arg.L}, d={arg.d}.")
  c = common.lm_config()
  c.model.num_layers = arg.L
  c.model.d_model = arg.d
  c.model.ffn_dim = arg.d    # FFN width = d (paper)
  c.opt.lr = PAPER_LR[arg.d]
  c.num_steps = 50_000
  c.log_every = 250
  c.eval_every = 2_500
  c.checkpoint_every = 5_000
  c.locater.kappa1 = 100.0
  c.sweep.kappa2 = tuple(arg.kappa2)   # the paper's, or kappa2=a,b,...
  common.wikitext2_variant(c, fairseq=arg.fairseq, seeds=arg.seeds,
                           contrast=arg.contrast, seed=arg.seed,
                           none=arg.none, both_readings=arg.both_readings)
  if arg.smoke:
    common.smoke(c, d_model=arg.d // 8)
  return c


def get_sweep():
  return [{"locater.kappa2": k} for k in common.KAPPA2_SWEEP]
