"""Complete training configs for the files in configs/ to edit.

`parse_arg` and `load_config_file` are re-exported: a config needs one import.
"""
import ml_collections
from ml_collections import config_dict

from qkspec.config import schema
from qkspec.config.args import load_config_file  # noqa: F401  (re-export)
from qkspec.config.args import parse_arg  # noqa: F401  (re-export)
from qkspec.config.errors import ConfigError
from qkspec.theory._locater_hparams import LocaterHParams

KAPPA2_SWEEP = (0.0, 1e-3, 1e-2, 1e-1, 1.0)   # paper Sec. 7, Figs. 6, 8-12


def _training(c):
  """Fields shared by every training config."""
  c.seed = 0                 # init and dropout PRNG seed
  c.opt = ml_collections.ConfigDict(dict(
      lr=2.5e-5,             # learning rate (constant in the paper)
      b1=0.9, b2=0.999,      # Adam betas (paper: fairseq defaults)
      eps=1e-8,              # Adam epsilon
      weight_decay=0.01,     # decoupled (AdamW), as fairseq's Adam
  ))
  c.locater = ml_collections.ConfigDict(dict(
      # kappa1, kappa2, target: qkspec.theory.locater.LocaterHParams, its
      # fields and defaults (no LocATER)
      **LocaterHParams()._asdict(),
      # the reading of J + kappa * penalty: "mean_loss" as printed, or
      # "summed_loss" as fairseq (mean loss + kappa / (B T) * penalty);
      # schema.PENALTY_ADDED_TO
      penalty_added_to="mean_loss",
  ))
  c.sweep = ml_collections.ConfigDict(dict(
      mode="zip",            # zip: member i takes entry i | product: all combos
      # schema.SWEEPABLE: values per member; () = not swept
      **dict.fromkeys(schema.SWEEPABLE, ()),
      member_batch=-1,       # members batched per step: 0 all (vmap), k: k at
                             # a time (lax.map), -1 auto (CPU 1, else all)
      # members on devices of their own (training.sweep.Layout); False:
      # every device holds every member; None: True on several devices of
      # one process
      shard_members=config_dict.placeholder(bool),
  ))
  c.num_steps = 50_000       # optimizer updates (>= 1)
  c.log_every = 100          # steps between train metrics + measurements
  c.eval_every = 1_000       # steps between evaluations
  c.checkpoint_every = 1_000  # steps between checkpoints
  c.max_to_keep = 2          # checkpoints kept
  c.eval_max_batches = 0     # eval batches per split (0 = the whole split)
  c.progress_every_s = 30.0  # seconds between progress lines; 0 = all
  c.compute_dtype = "float32"  # float32 | bfloat16 (params stay float32)
  c.steps_per_call = -1      # steps per compiled call (training.multi_step);
                             # -1 auto: 1 on a CPU, else the largest divisor
                             # <= 250 of the gcd of the three *_every
  c.precompile = True        # compile on threads while the state initialises
  c.multihost = False        # join a TPU pod slice's, SLURM or Open MPI job's
                             # processes (qkspec.runtime.processes)
  return c


def theory_config() -> ml_collections.ConfigDict:
  """The Sec. 2 model on Assumption-1 random walks (no data set)."""
  c = ml_collections.ConfigDict()
  c.task = "theory"
  c.model = ml_collections.ConfigDict(dict(
      num_layers=1,          # L
      d_model=16,            # d, token dimension
      num_heads=1,           # H (the paper: 1)
      qk_param="joint",      # joint W_QK (paper Sec. 2) | factored (W_Q, W_K)
      qkv_bias=False,        # no projection biases in the theory model
      out_proj=False,        # U = A X W_V^T, no output projection
      causal=False,          # Eq. (1) attends to every token
      temperature=config_dict.placeholder(float),  # lambda; None = sqrt(d)
                             # (one head; sqrt(d / num_heads) in general)
      attn_dropout=0.0,      # dropout on attention probabilities
      ffn_dim=16,            # F (W_F1: d -> F, W_F2: F -> d)
      activation="relu",     # sigma: relu | identity | gelu
      norm="none",           # none | post | pre (LayerNorm placement)
      ffn_bias=False,        # FFN biases
      dropout=0.0,           # residual dropout
      kernels="xla",         # qkspec.kernels (the theory model: xla only)
  ))
  c.data = ml_collections.ConfigDict(dict(
      seq_len=32,            # T context tokens; the target is x_{T+1}
      batch_size=64,         # B sequences per step, over all devices
      seed=0,                # data PRNG seed: batch k depends on (seed, k)
      cov="isotropic",       # Sigma: isotropic (I) | anisotropic (R^T R/d)
      eval_sequences=1024,   # held-out sequences for valid/loss
  ))
  return _training(c)


def synthetic_config(name: str = "sorting") -> ml_collections.ConfigDict:
  """A skip SAN on Dong et al.'s sorting or memorisation (`data.name`)."""
  c = theory_config()
  c.task = "synthetic"
  c.model.update(dict(
      d_model=32,            # d
      ffn_dim=64,            # F, MLP width (if model.mlp)
      skip=True,             # X + SA(X) (Dong et al.'s skip SAN)
      mlp=False,             # a ReLU MLP after each attention
  ))
  c.data = ml_collections.ConfigDict(dict(
      name=name,             # sorting | memorization (qkspec.data.synthetic)
      seq_len=8,             # T tokens per sequence
      vocab_size=10,         # V tokens = classes
      batch_size=64,         # B sequences per step
      seed=0,                # data PRNG seed: batch k depends on (seed, k)
      num_memorized=256,     # memorization: sequences in the bank
      eval_sequences=512,    # sorting: held-out sequences
  ))
  c.opt.lr = 1e-3
  return c


def lm_config() -> ml_collections.ConfigDict:
  """fairseq transformer_lm on WikiText-2 as in Sec. 7 and App. D."""
  c = ml_collections.ConfigDict()
  c.task = "lm"
  c.model = ml_collections.ConfigDict(dict(
      num_layers=1,          # L decoder layers (paper: 1, 3, 6)
      d_model=128,           # d = embed = attention dim (paper: 32, 128)
      num_heads=1,           # H (paper: 1)
      qk_param="factored",   # W_Q, W_K kernels (fairseq) | joint W_QK
      qkv_bias=True,         # biased q/k/v/out projections (fairseq)
      out_proj=True,         # attention output projection (fairseq)
      causal=True,           # decoder self-attention
      temperature=config_dict.placeholder(float),  # lambda; None =
                             # sqrt(d / num_heads), the head width (fairseq)
      attn_dropout=0.0,      # fairseq default attention_dropout
      ffn_dim=128,           # FFN width (paper: = d)
      activation="relu",     # fairseq default activation_fn
      norm="post",           # post (fairseq default) | pre | none
      ffn_bias=True,
      dropout=0.1,           # fairseq transformer_lm default dropout
      kernels="xla",         # xla | pallas: fused kernels for attention,
                             # Post-LN and loss (Hopper; qkspec.kernels)
  ))
  c.data = ml_collections.ConfigDict(dict(   # read by qkspec.data.pipeline
      name="wikitext2",      # tfds builder name (qkspec/data/wikitext2)
      data_dir="",           # tfds data dir; "" = $TFDS_DATA_DIR or
                             # ~/tensorflow_datasets
      manual_dir="",         # dir with the 3 token files; "" = download
      seq_len=64,            # T, tokens per sample (paper App. D)
      batch_size=64,         # B, sequences per step over all hosts (App. D)
      seed=0,                # shuffling seed: batch k depends on (seed, k)
  ))
  return _training(c)


def synthetic_data(c, vocab_size=50, train_tokens=4_000, eval_tokens=400):
  """Switches an lm config to a synthetic bigram stream (smoke tests)."""
  c.data.name = "synthetic"
  c.data.vocab_size = vocab_size       # V, including <eos>
  c.data.train_tokens = train_tokens   # tokens in the train stream
  c.data.eval_tokens = eval_tokens     # tokens in valid and in test
  return c


def smoke(c, d_model: int = 16) -> ml_collections.ConfigDict:
  """Shrinks a training config to a seconds-long CPU run (`:smoke`, tests)."""
  if c.task == "lm":
    synthetic_data(c)
    c.opt.lr = 1e-3
    c.eval_max_batches = 2
  else:
    c.data.eval_sequences = 16
  c.model.d_model = c.model.ffn_dim = d_model
  c.data.seq_len = c.data.batch_size = 8
  c.num_steps = 4
  c.log_every = c.eval_every = c.checkpoint_every = 2
  return c


def set_seed(c, seed: int, seeds: int) -> None:
  """`config.seed = seed`, checked against `seeds` (a figure config's args)."""
  if seeds < 1:
    raise ConfigError(f"seeds must be >= 1, got {seeds}.")
  if seed and seeds > 1:
    raise ConfigError(f"seed={seed} runs one seed and seeds={seeds} runs "
                      f"seeds 0..{seeds - 1} in one program: give one.")
  c.seed = seed


def readings_of(c, *, fairseq: bool, both_readings: bool) -> tuple[str, ...]:
  """The readings of kappa asked for; sets `locater.penalty_added_to`."""
  if fairseq and both_readings:
    raise ConfigError("fairseq trains fairseq's reading and both_readings "
                      "both readings side by side: give one.")
  if fairseq:
    c.locater.penalty_added_to = "summed_loss"
  return (tuple(schema.PENALTY_ADDED_TO) if both_readings   # mean, summed
          else (c.locater.penalty_added_to,))


def zip_members(c, members: list[tuple], seeds: int,
                readings: tuple[str, ...]) -> None:
  """`c.sweep` zips (kappa1, kappa2, reading) `members` for each seed."""
  kappa1, kappa2, reading = zip(*(members * seeds))
  c.sweep.mode = "zip"
  c.sweep.kappa1, c.sweep.kappa2 = kappa1, kappa2
  if len(readings) > 1:
    c.sweep.penalty_added_to = reading
  if seeds > 1:
    c.sweep.seed = tuple(s for s in range(seeds) for _ in members)


def wikitext2_variant(c, *, fairseq: bool = False, seeds: int = 1,
                      contrast: bool = False, seed: int = 0,
                      none: bool = False, both_readings: bool = False
                      ) -> ml_collections.ConfigDict:
  """The arguments of the WikiText-2 figure configs.

  `fairseq`: fairseq's reading of kappa. `seeds` > 1: seeds 0..N-1 in one
  program; `seed` = S: seed S alone (init and dropout), a run the report
  merges. `contrast`: one member without LocATER per seed (Fig. 7), zipped;
  `none`: that member alone. `both_readings`: every LocATER member under
  both readings side by side (the contrast member once).
  """
  readings = readings_of(c, fairseq=fairseq, both_readings=both_readings)
  set_seed(c, seed, seeds)
  if none and contrast:
    raise ConfigError("none trains the no-LocATER member alone and contrast "
                      "adds it to the sweep: give one.")
  if none and both_readings:
    raise ConfigError("none trains kappa1 = kappa2 = 0, the same under both "
                      "readings (the factor multiplies a zero penalty): "
                      "leave both_readings out.")
  if none:
    c.locater.kappa1 = c.locater.kappa2 = 0.0
    c.sweep.kappa1 = c.sweep.kappa2 = ()
  if contrast:
    zip_members(c, [(c.locater.kappa1, k, r) for r in readings
                    for k in c.sweep.kappa2] + [(0.0, 0.0, readings[0])],
                seeds, readings)
  elif seeds > 1 or both_readings:
    c.sweep.mode = "product"
    if seeds > 1:
      c.sweep.seed = tuple(range(seeds))
    if both_readings:
      c.sweep.penalty_added_to = readings
  return c
