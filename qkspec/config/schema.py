"""Validation of training configs, before anything is built or trained.

`validate(config)` raises `ConfigError` naming the offending key: unknown, of
the wrong type or impossible (negative kappa, heads not dividing d, ...).
`check_batch_split` needs the devices (`qkspec.training.sweep.make_plan`),
the checks that need the data run in `qkspec.training.tasks`.
"""
from typing import Any, Callable

from qkspec.config.errors import ConfigError
from qkspec.theory._locater_hparams import LocaterHParams

# The model's string options (qkspec/training/model.py implements each).
QK_PARAMS = ("factored", "joint")      # W_Q, W_K kernels | one joint W_QK
NORMS = ("post", "pre", "none")        # LayerNorm placement
ACTIVATIONS = ("relu", "identity", "gelu")   # sigma, model.ACTIVATIONS
KERNELS = ("xla", "pallas")            # qkspec.kernels: XLA | Pallas (GPU)
PALLAS_MAX_SEQ_LEN = 64  # T of one attention block (kernels.fused_attention)


def _int(minimum, nonzero=False):
  def check(v):
    if (isinstance(v, bool) or not isinstance(v, int) or v < minimum
        or (nonzero and v == 0)):
      return f"must be an integer >= {minimum}" + (", not 0" if nonzero
                                                    else "")
  return check


def _real(minimum=None, maximum=None, strict=False):
  def check(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
      return "must be a number"
    if minimum is not None and (v <= minimum if strict else v < minimum):
      return f"must be {'>' if strict else '>='} {minimum}"
    if maximum is not None and v > maximum:
      return f"must be <= {maximum}"
  return check


def _instance(kind, what):
  def check(v):
    if not isinstance(v, kind):
      return f"must be {what}"
  return check


_bool = _instance(bool, "True or False")
_bool_or_auto = _instance((bool, type(None)), "True, False or None (auto)")
_str = _instance(str, "a string")


def _choice(*options):
  def check(v):
    if v not in options:
      return f"must be one of {options}"
  return check


def _tuple_of(check_item):
  def check(v):
    if not isinstance(v, (tuple, list)):
      return "must be a tuple (empty: not swept)"
    for item in v:
      msg = check_item(item)
      if msg:
        return f"entries {msg} (got {item!r})"
  return check


def _temperature(v):
  msg = None if v is None else _real(0.0, strict=True)(v)
  if msg:
    return f"{msg} (or None: the square root of the head width)"


# The fields of `qkspec.theory.locater.LocaterHParams`: the strengths
# kappa1, kappa2 >= 0, the target tau any number.
LOCATER_CHECKS = {**dict.fromkeys(LocaterHParams._fields, _real(0.0)),
                  "target": _real()}
# What a sweep can vary per member.
SWEEPABLE = ("seed",) + LocaterHParams._fields + ("penalty_added_to",)

# The readings of kappa (`locater.penalty_added_to`, step.penalty_scale_of).
PENALTY_ADDED_TO = {
    "mean_loss": "mean loss + kappa * penalty, the paper's formula as printed",
    "summed_loss": ("fairseq: summed loss + kappa * penalty, gradients "
                    "divided by the target tokens per batch, i.e. kappa / "
                    "(batch_size * seq_len) next to the mean loss"),
}


def _penalty_added_to(v):
  if not isinstance(v, str) or v not in PENALTY_ADDED_TO:
    options = "; ".join(f"{k!r}: {doc}" for k, doc in PENALTY_ADDED_TO.items())
    return f"must be one of {tuple(PENALTY_ADDED_TO)} ({options})"


_COMMON: dict[str, Callable[[Any], str | None]] = {
    "task": _choice("theory", "lm", "synthetic"),
    "seed": _int(0),
    "model.num_layers": _int(1),
    "model.d_model": _int(1),
    "model.num_heads": _int(1),
    "model.qk_param": _choice(*QK_PARAMS),
    "model.qkv_bias": _bool,
    "model.out_proj": _bool,
    "model.causal": _bool,
    "model.temperature": _temperature,
    "model.attn_dropout": _real(0.0, 1.0),
    "model.ffn_dim": _int(1),
    "model.activation": _choice(*ACTIVATIONS),
    "model.norm": _choice(*NORMS),
    "model.ffn_bias": _bool,
    "model.dropout": _real(0.0, 1.0),
    "model.kernels": _choice(*KERNELS),
    "opt.lr": _real(0.0, strict=True),
    "opt.b1": _real(0.0, 1.0),
    "opt.b2": _real(0.0, 1.0),
    "opt.eps": _real(0.0),
    "opt.weight_decay": _real(0.0),
    **{f"locater.{k}": check for k, check in LOCATER_CHECKS.items()},
    "locater.penalty_added_to": _penalty_added_to,
    "sweep.mode": _choice("zip", "product"),
    "sweep.seed": _tuple_of(_int(0)),
    **{f"sweep.{k}": _tuple_of(check) for k, check in LOCATER_CHECKS.items()},
    "sweep.penalty_added_to": _tuple_of(_penalty_added_to),
    "sweep.member_batch": _int(-1),
    "sweep.shard_members": _bool_or_auto,
    "num_steps": _int(1),                 # 0 would train nothing: refused
    "steps_per_call": _int(-1, nonzero=True),  # -1 auto, else k >= 1
    "log_every": _int(1),
    "eval_every": _int(1),
    "checkpoint_every": _int(1),
    "max_to_keep": _int(1),
    "eval_max_batches": _int(0),
    "progress_every_s": _real(0.0),
    "compute_dtype": _choice("float32", "bfloat16"),
    "multihost": _bool,
    "precompile": _bool,
    "data.seq_len": _int(2),
    "data.batch_size": _int(1),
    "data.seed": _int(0),
}
_THEORY_DATA = {
    "data.cov": _choice("isotropic", "anisotropic"),
    "data.eval_sequences": _int(1),
}
_SYNTHETIC = {                            # qkspec.training.tasks (synthetic)
    "model.skip": _bool,                  # X + SA(X) instead of SA(X)
    "model.mlp": _bool,                   # a ReLU MLP after each attention
    "data.name": _choice("sorting", "memorization"),
    "data.vocab_size": _int(2),           # V tokens = classes
    "data.num_memorized": _int(1),        # memorization: sequences in the bank
    "data.eval_sequences": _int(1),       # sorting: held-out sequences
}
_LM_DATA = {
    "data.name": _choice("wikitext2", "synthetic"),   # qkspec.data | smoke
    "data.data_dir": _str,
    "data.manual_dir": _str,
    "data.verify_checksums": _bool,       # tests with fixtures only
    "data.vocab_size": _int(2),           # synthetic only
    "data.train_tokens": _int(2),         # synthetic only
    "data.eval_tokens": _int(2),          # synthetic only
}


def flatten(config, prefix: str = "") -> dict:
  """{"model.d_model": 16, ...}: the dotted keys of a (nested) config."""
  out = {}
  for k, v in config.items():
    if hasattr(v, "items"):
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


def validate(config) -> None:
  """Raises ConfigError naming the key of the first problem in `config`."""
  if "task" not in config and "experiment" in config:
    raise ConfigError(
        f"an experiment config (config.experiment={config.experiment!r}): "
        "run it with python launch/run.py (launch/train.py trains the "
        "configs with config.task).")
  flat = flatten(config)
  _check_fields(flat)
  _check_model(config.model, flat["task"], config.data.seq_len)
  if flat["task"] == "lm" and config.data.name == "synthetic":
    _check_synthetic(flat)
  _check_sweep(flat)


def _check_synthetic(flat: dict) -> None:
  """A synthetic LM stream: its fields, and no data set named beside it
  (`:smoke` sets data.name='synthetic'; a manual_dir or data_dir given
  with it would go unread)."""
  for key in ("vocab_size", "train_tokens", "eval_tokens"):
    if f"data.{key}" not in flat:
      raise ConfigError(f"config.data.{key} is missing (synthetic data).")
  for key in ("data.manual_dir", "data.data_dir"):
    if flat.get(key):
      raise ConfigError(
          f"config.{key}={flat[key]!r} names a data set, but the config "
          "trains on a synthetic stream (config.data.name='synthetic', as "
          ":smoke sets it): add --config.data.name=wikitext2 for a small "
          f"run on that data, or leave {key} out.")


def _check_fields(flat: dict) -> None:
  """Every field known, of its type and range; none missing."""
  task = flat.get("task")
  schema = {**_COMMON, **{"theory": _THEORY_DATA,
                          "synthetic": _SYNTHETIC}.get(task, _LM_DATA)}
  for key in flat:
    if key not in schema:
      raise ConfigError(f"unknown config key {key!r}.")
  for key, check in schema.items():
    if key in flat:
      msg = check(flat[key])
      if msg:
        raise ConfigError(f"config.{key} {msg}, got {flat[key]!r}.")
    elif not (key.startswith("sweep.") or key in _LM_DATA):
      raise ConfigError(f"config.{key} is missing.")


def _check_model(m, task: str, seq_len: int) -> None:
  """The model fields that must agree with each other and the task."""
  if m.d_model % m.num_heads:
    raise ConfigError(f"config.model.num_heads={m.num_heads} does not divide "
                      f"config.model.d_model={m.d_model}.")
  if task == "theory" and m.num_heads != 1 and not m.out_proj:
    raise ConfigError("config.model.out_proj must be True with num_heads > 1 "
                      "unless heads are concatenated (head_dim = d / H).")
  if m.kernels == "pallas" and (task != "lm" or m.qk_param != "factored"
                                or m.attn_dropout
                                or seq_len > PALLAS_MAX_SEQ_LEN):
    raise ConfigError("config.model.kernels='pallas' (fused GPU kernels) is "
                      "for the LM task with qk_param='factored', "
                      f"attn_dropout=0 and data.seq_len <= {PALLAS_MAX_SEQ_LEN}"
                      "; got "
                      f"task={task!r}, qk_param={m.qk_param!r}, attn_dropout="
                      f"{m.attn_dropout}, seq_len={seq_len}.")


def _check_sweep(flat: dict) -> None:
  """A zipped sweep's entries of one length (or 1)."""
  sweep = {k: flat[f"sweep.{k}"] for k in SWEEPABLE if flat.get(f"sweep.{k}")}
  if flat.get("sweep.mode", "zip") == "zip" and sweep:
    lengths = {len(v) for v in sweep.values()} - {1}
    if len(lengths) > 1:
      raise ConfigError(f"config.sweep entries must have equal lengths (or 1) "
                        f"with mode 'zip', got "
                        f"{ {k: len(v) for k, v in sweep.items()} }.")


def check_batch_split(config, num_devices: int) -> None:
  """Raises ConfigError unless the batch splits evenly over the
  `num_devices` devices that split each batch (all of them, or a member
  group's)."""
  if config.data.batch_size % num_devices:
    raise ConfigError(f"config.data.batch_size={config.data.batch_size} is "
                      f"not divisible by the {num_devices} devices that split "
                      f"each batch.")
