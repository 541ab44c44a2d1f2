r"""for_flax_example: LocATER and the diagnostics on a plain Flax transformer.

Launch (from the repository root)::

  python launch/run.py --config configs/for_flax_example.py \
      --workdir runs/for_flax_example
  python launch/run.py --config configs/for_flax_example.py:smoke \
      --workdir /tmp/w

A Pre-LN transformer encoder built from Flax's own
`nn.MultiHeadDotProductAttention` (2 layers, 2 heads, d = 32) learns Dong
et al.'s sorting task (T = 8 tokens, V = 8), once without LocATER and once
with `qkspec.for_flax.locater_penalty` added to its loss, from one
initialization. Prints `for_flax.spectrum_table` and
`for_flax.attention_table` at initialization and after each training and
writes `spectrum.csv`, `attention.csv`, `summary.csv` (+ .json) and
`fig_for_flax_example.png` (scale and entropy per head). Runs in about
half a minute on a 2-core CPU; it logs its time.

Expected result: both runs learn to sort; LocATER lowers every head's scale
tr(W_QK^T W_QK) far below its initial value and the run without LocATER,
and raises the attention entropy above the run without it.
"""
import ml_collections

from qkspec.config import args


def get_config(arg=None):
  """Full config; `arg="smoke"` gives a seconds-long run for tests."""
  arg = args.parse_arg(arg, smoke=False)
  c = ml_collections.ConfigDict()
  # Which qkspec.experiments module runs this config; read by launch/run.py.
  c.experiment = "for_flax_example"
  c.seed = 0                 # PRNG seed: initialization and batches
  c.num_layers = 2           # L transformer blocks
  c.num_heads = 2            # H heads per attention layer
  c.d_model = 32             # d, width
  c.mlp_dim = 64             # F, MLP width
  c.seq_len = 8              # T tokens per sequence
  c.vocab_size = 8           # V tokens = classes (chance accuracy 1/V)
  c.batch_size = 64          # B sequences per update
  c.num_steps = 300          # Adam updates per training
  c.lr = 3e-3                # Adam learning rate
  c.eval_batch_size = 256    # sequences the tables are measured on
  # qkspec.theory.locater.LocaterHParams of the LocATER run
  c.locater = ml_collections.ConfigDict(dict(
      kappa1=1e-2,           # scale strength, tr(W_QK^T W_QK)
      kappa2=1e-2,           # mean strength, (tr W_QK - target)^2
      target=1.0,            # the eigen-sum tr(W_QK) is held to
  ))
  if arg.smoke:
    c.num_layers = 1
    c.d_model = 8
    c.mlp_dim = 16
    c.seq_len = 6
    c.batch_size = 8
    c.num_steps = 5
    c.eval_batch_size = 16
  return c
