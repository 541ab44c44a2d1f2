r"""locater_wt2: LocATER on WikiText-2, the kappa2 sweep of paper Fig. 6.

fairseq transformer_lm as in Sec. 7: d = 128 (embedding = attention = FFN),
1 layer, 1 head, Post-LN, ReLU, dropout 0.1, sinusoidal positions, untied
output; T = 64, batch 64; AdamW(0.9, 0.999, 1e-8, weight decay 0.01),
constant lr 2.5e-5, no clipping, 50,000 updates; kappa1 = 100 and
kappa2 in {0, 1e-3, 1e-2, 1e-1, 1} (target tr(W_QK) = 1). The five members
train side by side in one vmapped, jit-compiled step.

Launch (from the repository root; the offline copy of WikiText-2 on these
machines lies in ../shared/data/wikitext-2, otherwise leave manual_dir empty
to download)::

  python launch/train.py --config configs/locater_wt2.py \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds --workdir /tmp/exp_runs/locater_wt2
  python launch/plot_training.py --workdir /tmp/exp_runs/locater_wt2

  python launch/train.py --config configs/locater_wt2.py:smoke --workdir /tmp/wt2_smoke

The fairseq reading of kappa (below)::

  python launch/train.py --config configs/locater_wt2.py:fairseq \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds \
      --workdir /tmp/exp_runs/locater_wt2_fairseq

Seeds: `seeds=N` (N > 1) runs every kappa2 member with seeds 0..N-1 in
the same vmapped program (sweep.mode = "product": 5 N members, named
"seed=s,kappa2=k"), or `seed=S` trains seed S alone (one run per seed,
each short enough for one GPU slice; the report merges them); the report
(launch/report.py) gives mean +- std::

  python launch/train.py --config configs/locater_wt2.py:seeds=3,fairseq \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds \
      --workdir /tmp/exp_runs/locater_wt2_s3_fairseq
  python launch/report.py --runs /tmp/exp_runs/locater_wt2_s3,/tmp/exp_runs/locater_wt2_s3_fairseq \
      --out /tmp/exp_runs/REPRODUCTION.md

(the runs' records go beside that report, in /tmp/exp_runs/reproduction/;
`--out REPRODUCTION.md` instead adds them to the repository's report,
whose committed records hold the paper's runs so far).

The contrast with no LocATER at all (kappa1 = kappa2 = 0) is the Fig. 7
config, the same model: configs/rho_training.py:seeds=3[,fairseq]; or add
it to this sweep with `contrast` (one more member per seed, zip mode); or
train it alone with `none`.

Two readings of kappa (config.locater.penalty_added_to; the paper cannot
tell which the authors ran). The paper writes J + kappa1 tr(W_QK^T W_QK) +
kappa2 (tr W_QK - 1)^2 with J the mean token cross-entropy: "mean_loss",
the default, trains exactly that. The paper trains in fairseq, whose
criterion returns the cross-entropy summed over the batch's target tokens
(a penalty is added to that sum) and whose trainer divides every gradient
by sample_size, the target tokens per batch (64 x 64 = 4096): next to the
mean loss the penalty then acts with kappa / 4096. The `fairseq` argument
selects that reading ("summed_loss"); kappa1 and kappa2 stay as printed.
`both_readings` trains the members under both readings side by side in
one program (sweep.penalty_added_to: 10 members named
"kappa2=k,penalty_added_to=r", the same batches, initialisation and
dropout for both; the report splits them by reading), e.g.
configs/locater_wt2.py:both_readings,seeds=3,contrast (33 members).

Expected: with stronger kappa2 the eigenspectrum scale tr(W_QK^T W_QK)
shrinks (Fig. 6B), the attention entropy stays higher (6C) and the valid
perplexity improves (6D): fig6_curves.png / fig6_vs_kappa2.png. The paper
sees two phases (the first ~10^4 updates and the rest). Runtime: 50k steps
x 5 members of a 1-layer d=128 model take 8.0 minutes on one H100 with
--config.compute_dtype=bfloat16 --config.model.loss_chunk=4096 (~116 steps/s,
bench/gpu_paper.py);
the smoke variant (synthetic bigram data, d = 16) runs in seconds on a CPU.
Deviations from fairseq: bf16 instead of FP16 if compute_dtype=bfloat16;
random-start-free consecutive blocks (see qkspec/data/pipeline.py).
"""
from qkspec.config import defaults as common


def get_config(arg=None):
  arg = common.parse_arg(arg, smoke=False, fairseq=False,
                         seeds=1, contrast=False, seed=0,
                         none=False, both_readings=False)
  c = common.lm_config()
  c.opt.lr = 2.5e-5          # constant (paper, d = 128)
  c.num_steps = 50_000       # updates (paper)
  c.log_every = 250          # steps between measurements (rho, entropy, ...)
  c.eval_every = 2_500       # steps between valid/test perplexity
  c.checkpoint_every = 5_000
  c.locater.kappa1 = 100.0   # fixed scale strength (paper)
  c.locater.target = 1.0     # tr(W_QK) target (paper)
  c.sweep.kappa2 = common.KAPPA2_SWEEP
  common.wikitext2_variant(c, fairseq=arg.fairseq, seeds=arg.seeds,
                           contrast=arg.contrast, seed=arg.seed,
                           none=arg.none, both_readings=arg.both_readings)
  if arg.smoke:
    common.smoke(c)
  return c


def get_sweep():
  """The same sweep as plain override dicts (one per member)."""
  return [{"locater.kappa2": k} for k in common.KAPPA2_SWEEP]
