"""Validation of training configs, before anything is built or trained.

`validate(config)` raises ValueError naming the offending key for an unknown
key, a wrong type or an impossible value (negative kappa, d not divisible by
the heads, a batch that does not split over the devices, ...). Checks that
need the data (seq_len longer than a split) run in `qkspec.training.tasks`.
"""
from typing import Any, Callable


# Allowed values of the model's string options (qkspec/training/model.py
# implements each one).
QK_PARAMS = ("factored", "joint")      # W_Q, W_K kernels | one joint W_QK
NORMS = ("post", "pre", "none")        # LayerNorm placement
ACTIVATIONS = ("relu", "identity", "gelu")
LOSS_IMPLS = ("chunked", "pallas")     # fused_xent | pallas_xent
ATTENTION_IMPLS = ("xla", "pallas")    # model.SelfAttention | attention_kernel
LOSS_LOGITS = ("float32", "compute")   # the chunked loss's logits dtype
PALLAS_SETTINGS = "64x128x4x2"         # BN x BV x warps x stages (pallas_xent)
DH_IN_FORWARD = "fwd"   # in a "FORWARD/DH/DW" setting's DH place: no dh kernel
DH_IN_FLASH = "fa3"     # the same from FlashAttention-3's forward (Hopper)
DW_IN_FLASH = "fa3"     # in DW's place (after DH's "fa3"): dW as attention
                        # ("fa3xG": in G token groups)


def check_pallas_settings(block_rows: int, block_vocab: int, num_warps: int,
                          num_stages: int, splits: int = 1) -> None:
  """ValueError unless BN and BV are powers of two >= 16 (Triton's smallest
  dot side), warps and vocabulary splits powers of two and stages >= 1
  (pallas_xent's kernels)."""
  spec = f"{block_rows}x{block_vocab}x{num_warps}x{num_stages}" + (
      f"x{splits}" if splits != 1 else "")
  for name, v, low in (("BN", block_rows, 16), ("BV", block_vocab, 16),
                       ("WARPS", num_warps, 1), ("SPLITS", splits, 1)):
    if v < low or v & (v - 1):
      raise ValueError(f"Pallas settings {spec!r}: {name} must be a power "
                       f"of two >= {low}.")
  if num_stages < 1:
    raise ValueError(f"Pallas settings {spec!r}: STAGES must be >= 1.")


def check_pallas_kernels(forward: tuple, dh: tuple, dw: tuple) -> None:
  """`check_pallas_settings` of each kernel's (BN, BV, warps, stages[,
  splits]), and no vocabulary splits for the dW kernel (one program per
  column block already)."""
  for fields in (forward, dh, dw):
    check_pallas_settings(*fields)
  if tuple(dw[4:]) not in ((), (1,)):
    raise ValueError(f"Pallas settings: the dW kernel takes no vocabulary "
                     f"splits (a program per column block already), got "
                     f"{dw[4]}.")


def _launch(part: str, spec: str) -> tuple:
  try:
    fields = tuple(int(p) for p in part.split("x"))
    if len(fields) not in (4, 5):
      raise ValueError
  except (ValueError, AttributeError):
    raise ValueError(f"Pallas settings must read BNxBVxWARPSxSTAGES[xSPLITS]"
                     f", e.g. {PALLAS_SETTINGS!r}, or FORWARD/DH/DW, three "
                     f"such ('{DH_IN_FORWARD}' or '{DH_IN_FLASH}' in place "
                     f"of DH), got "
                     f"{spec!r}.") from None
  check_pallas_settings(*fields)      # names the offending field
  return fields


def pallas_settings(spec: str) -> dict:
  """"BNxBVxWARPSxSTAGES" (config.model.loss_pallas) -> the keyword
  arguments of `pallas_xent.linear_cross_entropy`, checked as above: one
  setting for its three kernels, or "FORWARD/DH/DW" (three settings, e.g.
  "128x128x8x3/64x128x4x2/64x128x4x2"), each kernel its own (`backward`).
  A fifth field, "xSPLITS", splits the vocabulary of the forward or dh
  kernel over that many programs per row block (`vocab_splits`; not the
  dW kernel's). "fwd" in place of DH (e.g. "64x128x4x2/fwd/64x128x4x2")
  takes dh from the forward kernel's softmax mean of W's columns instead
  of a dh kernel (`dh_in_forward`); "fa3" there does the same with
  jax's FlashAttention-3 kernel as that forward (`flash_forward`: FORWARD's
  BN, BV, STAGES and SPLITS are its block_q, block_kv, concurrent steps
  and splits; evaluation keeps the Triton forward). "fa3" in DW's place
  too (e.g. "64x128x4x2x4/fa3/fa3") computes dW with the same kernel, the
  vocabulary as queries and the tokens as keys (`flash_dw`,
  `flash_forward.weight_grad`: FORWARD's BN, BV and STAGES again, in as
  many token groups as FORWARD's SPLITS, or G with "fa3xG").
  bench/xent_kernel.py times such settings on a GPU."""
  parts = spec.split("/") if isinstance(spec, str) else [spec]
  if len(parts) not in (1, 3):
    raise ValueError(f"Pallas settings must be one BNxBVxWARPSxSTAGES or "
                     f"three joined by '/' (forward, dh, dW), got {spec!r}.")
  in_forward = len(parts) == 3 and parts[1] in (DH_IN_FORWARD, DH_IN_FLASH)
  flash = in_forward and parts[1] == DH_IN_FLASH
  flash_dw = len(parts) == 3 and parts[2].startswith(DW_IN_FLASH)
  groups = parts[2][len(DW_IN_FLASH):] if flash_dw else ""
  if groups and not (groups[0] == "x" and groups[1:].isdigit()
                     and int(groups[1:]) >= 1):
    raise ValueError(f"Pallas settings {spec!r}: DW's '{DW_IN_FLASH}' "
                     f"takes 'xG', G >= 1 token groups, got {parts[2]!r}.")
  if flash_dw and not flash:
    raise ValueError(f"Pallas settings {spec!r}: '{DW_IN_FLASH}' in DW's "
                     f"place needs '{DH_IN_FLASH}' in DH's (FlashAttention-3 "
                     f"for both).")
  if in_forward:
    parts[1] = parts[0]       # the dh kernel's launch: unused
  if flash_dw:                # the Triton dW kernel's launch: unused
    parts[2] = "x".join(parts[0].split("x")[:4])
  launches = [_launch(part, spec) for part in parts]
  out = dict(zip(("block_rows", "block_vocab", "num_warps", "num_stages",
                  "vocab_splits"), launches[0]))
  if len(launches) == 3:
    check_pallas_kernels(*launches)
    out["backward"] = tuple(launches[1:])
  if in_forward:
    out["dh_in_forward"] = True
  if flash:
    out["flash_forward"] = True
  if flash_dw:               # G, else the forward's vocabulary splits
    out["flash_dw"] = int(groups[1:]) if groups else out.get("vocab_splits", 1)
  return out


def _is_int(v):
  return isinstance(v, int) and not isinstance(v, bool)


def _int(minimum):
  def check(v):
    if not _is_int(v) or v < minimum:
      return f"must be an integer >= {minimum}"
  return check


def _nonzero_int_from(minimum):
  def check(v):
    if not _is_int(v) or v < minimum or v == 0:
      return f"must be an integer >= {minimum}, not 0"
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


def _bool(v):
  if not isinstance(v, bool):
    return "must be True or False"


def _str(v):
  if not isinstance(v, str):
    return "must be a string"


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


def _pallas_settings(v):
  try:
    pallas_settings(v)
  except ValueError as e:
    return f"is not a valid setting ({e})"


def _temperature(v):
  # None: sqrt(head width). 0.0 is its old spelling, still accepted (the
  # model warns: qkspec.training.model.attention_temperature).
  if v is None or (not isinstance(v, bool) and v == 0):
    return None
  msg = _real(0.0, strict=True)(v)
  if msg:
    return f"{msg} (or None: the square root of the head width)"


# LocATER's hyperparameters, the `locater.*` fields: the fields of
# `qkspec.theory.locater.LocaterHParams`, in order (the config layer loads
# without jax, so it names them here; qkspec/training/sweep.py asserts that
# the two agree). Every one of them, and the seed, can be swept.
LOCATER_CHECKS = {
    "kappa1": _real(0.0),                 # scale strength
    "kappa2": _real(0.0),                 # mean strength
    "target": _real(),                    # tau
}
LOCATER_FIELDS = tuple(LOCATER_CHECKS)
# Per-member values of a sweep: the seed, LocATER's hyperparameters and the
# reading of kappa (`locater.penalty_added_to`, below), so one program can
# train both readings side by side (qkspec.training.step: a per-member
# factor on the penalty).
SWEEPABLE = ("seed",) + LOCATER_FIELDS + ("penalty_added_to",)

# `locater.penalty_added_to`: the loss the LocATER penalty is added to, i.e.
# which reading of kappa (qkspec.training.step.penalty_scale_of applies it).
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
    "opt.lr": _real(0.0, strict=True),
    "opt.b1": _real(0.0, 1.0),
    "opt.b2": _real(0.0, 1.0),
    "opt.eps": _real(0.0),
    "opt.weight_decay": _real(0.0),
    "opt.schedule": _choice("constant", "warmup_constant", "warmup_cosine"),
    "opt.warmup_steps": _int(0),
    "opt.min_lr_fraction": _real(0.0, 1.0),
    **{f"locater.{k}": check for k, check in LOCATER_CHECKS.items()},
    "locater.penalty_added_to": _penalty_added_to,
    "sweep.mode": _choice("zip", "product"),
    "sweep.seed": _tuple_of(_int(0)),
    **{f"sweep.{k}": _tuple_of(check) for k, check in LOCATER_CHECKS.items()},
    "sweep.penalty_added_to": _tuple_of(_penalty_added_to),
    "sweep.member_batch": _int(-1),
    "num_steps": _int(1),                 # 0 would train nothing: refused
    "steps_per_call": _nonzero_int_from(-1),  # -1 auto, else k >= 1
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
_SYNTHETIC = {                            # qkspec.training.synthetic_tasks
    "model.skip": _bool,                  # X + SA(X) instead of SA(X)
    "model.mlp": _bool,                   # a ReLU MLP after each attention
    "data.name": _choice("sorting", "memorization"),
    "data.vocab_size": _int(2),           # V tokens = classes
    "data.num_memorized": _int(1),        # memorization: sequences in the bank
    "data.eval_sequences": _int(1),       # sorting: held-out sequences
}
_LM_MODEL = {
    "model.fused_loss": _bool,            # qkspec.training.fused_xent, no [B,T,V] logits
    "model.loss_chunk": _int(1),          # rows per fused-loss chunk
    "model.loss_kernel_grad": _choice("vd", "dv"),  # fused-loss dW layout
    "model.loss_impl": _choice(*LOSS_IMPLS),  # fused_xent | pallas_xent
    "model.attention_impl": _choice(*ATTENTION_IMPLS),
    "model.fused_qkv": _bool,             # one matmul for q, k, v
    "model.fused_qkv_attention": _bool,   # ... inside the attention kernel
    "model.fused_norm": _bool,            # Post-LN add+dropout+LN one kernel
    "model.fused_ffn": _bool,             # fused_norm + the FFN, one kernel
    "model.fused_out_proj": _bool,        # fused_norm + W_O, one kernel
    "model.loss_pallas": _pallas_settings,  # BNxBVxWARPSxSTAGES (pallas)
    "model.loss_logits": _choice(*LOSS_LOGITS),  # chunked: logits dtype
}
_LM_DATA = {
    "data.name": _str,
    "data.data_dir": _str,
    "data.manual_dir": _str,
    "data.verify_checksums": _bool,       # tests with fixtures only
    "data.vocab_size": _int(2),           # synthetic only
    "data.train_tokens": _int(2),         # synthetic only
    "data.eval_tokens": _int(2),          # synthetic only
}


def flatten(config, prefix: str = "") -> dict:
  """{"model.d_model": 16, ...}: the dotted keys of a (nested) config."""
  items = config.items() if hasattr(config, "items") else []
  out = {}
  for k, v in items:
    if hasattr(v, "items"):
      out.update(flatten(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = v
  return out


# Keys added after configs were saved; missing means their default.
_OPTIONAL = ("steps_per_call", "model.loss_kernel_grad", "model.loss_impl",
             "model.loss_pallas", "model.loss_logits", "precompile",
             "model.attention_impl", "model.fused_qkv", "model.fused_norm",
             "model.fused_ffn", "model.fused_out_proj",
             "model.fused_qkv_attention")


def validate(config, num_devices: int | None = None) -> None:
  """Raises ValueError naming the key of the first problem in `config`.

  Args:
    config: a training ConfigDict (see qkspec/config/defaults.py).
    num_devices: if given, the batch must split evenly over this many.
  """
  flat = flatten(config)
  task = flat.get("task")
  schema = dict(_COMMON)
  if task == "theory":
    schema.update(_THEORY_DATA)
  elif task == "synthetic":
    schema.update(_SYNTHETIC)
  else:
    schema.update(_LM_MODEL)
    schema.update(_LM_DATA)
  for key in flat:
    if key not in schema:
      raise ValueError(f"unknown config key {key!r}.")
  for key, check in schema.items():
    if key in flat:
      msg = check(flat[key])
      if msg:
        raise ValueError(f"config.{key} {msg}, got {flat[key]!r}.")
    elif not (key.startswith("sweep.") or key in _LM_DATA
              or key in _OPTIONAL):
      raise ValueError(f"config.{key} is missing.")

  m = config.model
  if m.d_model % m.num_heads:
    raise ValueError(f"config.model.num_heads={m.num_heads} does not divide "
                     f"config.model.d_model={m.d_model}.")
  if task == "theory" and m.num_heads != 1 and not m.out_proj:
    raise ValueError("config.model.out_proj must be True with num_heads > 1 "
                     "unless heads are concatenated (head_dim = d / H).")
  if (task == "lm" and flat.get("model.loss_impl") == "pallas"
      and not m.fused_loss):
    raise ValueError("config.model.loss_impl='pallas' is a fused loss: it "
                     "needs config.model.fused_loss=True.")
  if task == "lm" and flat.get("model.fused_norm") and m.norm != "post":
    raise ValueError("config.model.fused_norm=True fuses Post-LN's residual "
                     "sum, dropout and LayerNorm: it needs "
                     f"config.model.norm='post', got {m.norm!r}.")
  if task == "lm" and flat.get("model.fused_ffn") and not (
      flat.get("model.fused_norm") and m.activation == "relu"
      and m.ffn_dim == m.d_model):
    raise ValueError("config.model.fused_ffn=True puts the FFN in "
                     "fused_norm's kernel: it needs config.model.fused_norm="
                     "True, activation='relu' and ffn_dim == d_model; got "
                     f"fused_norm={flat.get('model.fused_norm')}, "
                     f"activation={m.activation!r}, ffn_dim={m.ffn_dim}, "
                     f"d_model={m.d_model}.")
  if task == "lm" and flat.get("model.fused_qkv_attention") and not (
      flat.get("model.attention_impl") == "pallas"
      and flat.get("model.fused_qkv") and m.num_heads == 1):
    raise ValueError("config.model.fused_qkv_attention=True computes q, k, "
                     "v inside the attention's kernel: it needs "
                     "config.model.attention_impl='pallas', fused_qkv=True "
                     "and num_heads=1; got attention_impl="
                     f"{flat.get('model.attention_impl')!r}, fused_qkv="
                     f"{flat.get('model.fused_qkv')}, num_heads="
                     f"{m.num_heads}.")
  if task == "lm" and flat.get("model.fused_out_proj") and not (
      flat.get("model.fused_norm") and m.out_proj):
    raise ValueError("config.model.fused_out_proj=True puts the attention's "
                     "output projection in fused_norm's kernel: it needs "
                     "config.model.fused_norm=True and out_proj=True; got "
                     f"fused_norm={flat.get('model.fused_norm')}, "
                     f"out_proj={m.out_proj}.")
  if (task == "lm" and flat.get("model.loss_logits", "float32") != "float32"
      and (not m.fused_loss or flat.get("model.loss_impl") == "pallas")):
    raise ValueError("config.model.loss_logits='compute' is an option of the "
                     "chunked fused loss (fused_loss=True, loss_impl="
                     "'chunked'); the Pallas kernels keep their logits tiles "
                     "in float32 registers.")
  if task == "lm" and config.data.name == "synthetic":
    for key in ("vocab_size", "train_tokens", "eval_tokens"):
      if f"data.{key}" not in flat:
        raise ValueError(f"config.data.{key} is missing (synthetic data).")
  if config.opt.schedule != "constant" and (
      config.opt.warmup_steps > config.num_steps):
    raise ValueError("config.opt.warmup_steps exceeds config.num_steps.")
  if num_devices is not None and config.data.batch_size % num_devices:
    raise ValueError(f"config.data.batch_size={config.data.batch_size} is not "
                     f"divisible by the {num_devices} devices.")
  sweep = {k: flat[f"sweep.{k}"] for k in SWEEPABLE if flat.get(f"sweep.{k}")}
  if flat.get("sweep.mode", "zip") == "zip" and sweep:
    lengths = {len(v) for v in sweep.values()} - {1}
    if len(lengths) > 1:
      raise ValueError(f"config.sweep entries must have equal lengths (or 1) "
                       f"with mode 'zip', got "
                       f"{ {k: len(v) for k, v in sweep.items()} }.")
