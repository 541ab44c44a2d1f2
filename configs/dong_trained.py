r"""dong_trained: trained SANs, their paths and rank collapse (Dong Sec. 5).

Which paths carry a trained skip SAN, and rank collapse without skips.

Launch (from the repository root)::

  python launch/run.py --config configs/dong_trained.py \
      --workdir runs/dong_trained
  python launch/run.py --config configs/dong_trained.py:smoke --workdir /tmp/w

The run logs each training's progress and wall time and each
measurement's time. A rerun with the same workdir resumes from the training
checkpoints and only measures.

Trains skip SANs (L = 6, H = 2, d = 32, T = 8, V = 10 tokens/classes, joint
W_QK, value with W_O folded in, learned token and position embeddings,
linear readout; no LayerNorm) on Dong et al.'s sorting and memorisation
tasks, without and with ReLU MLPs, `num_seeds` seeds per model in one
vmapped sweep (`config.task = "synthetic"` through qkspec.training). Then
evaluates each trained network restricted to its paths of length <= k
(k = 0..L), removes skips / MLPs / single layers' attention at evaluation,
and reads each layer's QK-eigenspectrum. Writes `path_eval.csv`,
`rank_trained.csv`, `layer_spectra.csv`, `summary.csv` (+ .json),
`fig_paths_trained.png`, `fig_rank_trained.png`, and the training workdirs
under `train/<task>/<variant>`. The summary table is printed.
"""
import ml_collections
from ml_collections import config_dict

from qkspec.config import args


def get_config(arg=None):
  """Full config; `arg="smoke"` gives a tiny run for tests."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "dong_trained"
  c.seed = 0                 # first seed: init, and data seed of every run
  c.num_seeds = 3            # seeds trained side by side (vmapped sweep)
  c.tasks = ("sorting", "memorization")       # qkspec.data.synthetic.TASKS
  c.variants = ("san_skip", "san_skip_mlp")   # skip SAN without / with MLPs
  c.num_layers = 6           # L
  c.num_heads = 2            # H
  c.d_model = 32             # d, token dimension
  c.mlp_dim = 64             # F, MLP width (san_skip_mlp)
  c.temperature = config_dict.placeholder(float)  # lambda; None: sqrt(d/H)
  c.seq_len = 8              # T tokens per sequence
  c.vocab_size = 10          # V tokens = classes (chance accuracy 1/V)
  c.batch_size = 64          # B sequences per update
  c.num_memorized = 256      # memorisation: sequences in the bank
  c.eval_sequences = 512     # sorting: held-out sequences measured
  c.lr = 1e-3                # AdamW learning rate (constant), weight decay 0.01
  c.num_steps = 600          # updates per (task, variant)
  if arg.smoke:              # one task and variant, tiny: seconds on a CPU
    c.tasks = ("sorting",)
    c.variants = ("san_skip_mlp",)
    c.num_seeds = 2
    c.num_layers = 2
    c.d_model = 8
    c.mlp_dim = 8
    c.seq_len = 4
    c.vocab_size = 4
    c.batch_size = 16
    c.num_memorized = 16
    c.eval_sequences = 32
    c.num_steps = 8
  return c
