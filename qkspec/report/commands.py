"""The launch commands the report prints, as today's code runs them.

A record keeps the command its run was trained with. Where that command
sets model fields today's config no longer has (the performance switches
that `model.kernels` replaced: `model.loss_impl`, `attention_impl`,
`fused_qkv`, `fused_norm`, `loss_pallas`, `loss_chunk`, ...), `today` gives
the equivalent that runs now (`--config.model.kernels=pallas` where any of
them chose a Pallas kernel) and `retired` the flags as trained, which the
report prints only beside the commit they ran at (the record's "commit").
`check` loads a command's config as `launch/train.py` would, without
training: its file and argument, each `--config.x=y`, the schema.
`config_command` rebuilds the command of a run directory from its
config.json, as the record of the run keeps it; `by_run` gives each run's
command as today's code runs it, once per run.
"""
import ast
import json
import pathlib
import shlex

from qkspec.config import args as args_lib
from qkspec.config import argv
from qkspec.config import defaults
from qkspec.config import schema

# retired field -> the value that chose a Pallas kernel (model.kernels=pallas)
PALLAS = {"model.loss_impl": "pallas", "model.attention_impl": "pallas",
          "model.fused_qkv": "True", "model.fused_norm": "True"}
KERNELS = "--config.model.kernels=pallas"
REPO = pathlib.Path(__file__).resolve().parents[2]   # configs/ is here


def parse(command: str) -> dict:
  """{"launcher", "config" (path), "arg", "overrides" [(key, text)],
  "workdir"} of a `python launch/<x>.py --config f.py:arg ...` line."""
  words = shlex.split(command)
  if len(words) < 2 or words[0] != "python" or not words[1].startswith(
      "launch/"):
    raise ValueError(f"not a launch command: {command!r}.")
  found, rest = argv.parse(words[2:])
  unknown = [f.words[0] for f in found
             if f.name not in ("config", "workdir")
             and not f.name.startswith("config.")] + rest
  if unknown:
    raise ValueError(f"{command!r}: unknown flag {unknown[0]!r}.")
  config, _, arg = (argv.value(found, "config") or "").partition(":")
  return dict(launcher=words[1], config=config or None, arg=arg or None,
              overrides=argv.overrides(found),
              workdir=argv.value(found, "workdir"))


def _known(config) -> set[str]:
  return set(schema.flatten(config))


def retired(command: str) -> list[tuple[str, str]]:
  """The `--config.x=y` of `command` that today's config lacks."""
  c = parse(command)
  config = _load(c)
  known = _known(config)
  return [(k, v) for k, v in c["overrides"] if k not in known]


def as_run_today(command: str) -> str:
  """`today(command)`, or `command` itself where its config cannot be
  loaded (a command rebuilt "not exactly", which says so)."""
  try:
    return today(command)
  except (ValueError, OSError):
    return command


def today(command: str) -> str:
  """`command` without its retired flags, `KERNELS` where one of them
  chose a Pallas kernel (after --config)."""
  gone = retired(command)
  if not gone:
    return command
  words = shlex.split(command)
  kept = argv.without(words[2:], {f"{no}config.{k}" for k, _ in gone
                                  for no in ("", "no")})
  if any(PALLAS.get(k) == v for k, v in gone) and KERNELS not in kept:
    config = next(f for f in argv.parse(kept)[0] if f.name == "config")
    kept.insert(kept.index(config.words[0]) + len(config.words), KERNELS)
  return shlex.join(words[:2] + kept)


def _load(c: dict):
  if c["config"] is None:
    raise ValueError("a launch command needs --config.")
  path = REPO / c["config"]
  return args_lib.load_config_file(path, c["arg"])


def _value(text: str, old):
  """A `--config.x=` text as the type of the field's value `old`."""
  if isinstance(old, bool):
    if text.lower() not in ("true", "false", "1", "0"):
      raise ValueError(f"{text!r} is not a bool.")
    return text.lower() in ("true", "1")
  if isinstance(old, str) or old is None and not text[:1].isdigit():
    return text
  value = ast.literal_eval(text)
  return tuple(value) if isinstance(old, (tuple, list)) else type(old)(value)


def check(command: str):
  """The config `command` trains, loaded and validated as
  `launch/train.py` would before training; ValueError names what today's
  code refuses (an unknown key first)."""
  c = parse(command)
  if c["workdir"] is None:
    raise ValueError(f"{command!r} needs --workdir.")
  config = _load(c)
  known = _known(config)
  for key, text in c["overrides"]:
    if key not in known:
      raise ValueError(f"unknown config key {key!r} in {command!r}.")
    parent, _, name = key.rpartition(".")
    node = config
    for part in filter(None, parent.split(".")):
      node = node[part]
    node[name] = _value(text, node[name])
  if "task" in config:
    schema.validate(config)
  return config


def config_file(fig: str, layers: int, d: int) -> tuple[str, list[str]]:
  """(configs/ module, its arguments) of figure `fig` (model L x d)."""
  if fig in ("6", "7"):
    return ("locater_wt2" if fig == "6" else "rho_training"), []
  return "depth_width", [f"L={layers}", f"d={d}"]


def swept_kappa2(config) -> list[float]:
  """The LocATER members' kappa2 (kappa1 > 0) in a config, each once."""
  sweep = config.get("sweep", {})
  kappa2 = list(sweep.get("kappa2") or ())
  kappa1 = list(sweep.get("kappa1") or ()) or [
      config["locater"]["kappa1"]] * len(kappa2)
  return list(dict.fromkeys(k2 for k1, k2 in zip(kappa1, kappa2) if k1 > 0))


def _argument(config, fig: str, parts: list[str], smoke: bool) -> str:
  """The config file's argument that rebuilds `config` (figure `fig`),
  after its own `parts`."""
  sweep = config.get("sweep", {})
  kappa2 = swept_kappa2(config)
  if fig != "7" and kappa2 and kappa2 != list(defaults.KAPPA2_SWEEP):
    parts.append("kappa2=" + ",".join(f"{k:g}" for k in kappa2))
  seeds = set(sweep.get("seed") or ())
  if len(seeds) > 1:
    parts.append(f"seeds={len(seeds)}")
  elif config.get("seed"):
    parts.append(f"seed={config['seed']}")     # one seed alone
  if fig != "7" and 0.0 in (sweep.get("kappa1") or ()):
    parts.append("contrast")                   # a no-LocATER member
  elif (fig != "7" and not sweep.get("kappa1") and not sweep.get("kappa2")
        and config["locater"]["kappa1"] == 0
        and config["locater"]["kappa2"] == 0):
    parts.append("none")                       # that member alone
  if sweep.get("penalty_added_to"):
    parts.append("both_readings")              # side by side, one program
  elif config["locater"].get("penalty_added_to") == "summed_loss":
    parts.append("fairseq")
  return ",".join(parts + ["smoke"] * smoke)


def config_command(config, run_dir: str, fig: str, smoke: bool) -> str:
  """The launch command that rebuilds `config` (a config.json dict of
  figure `fig`, `run_cells.figure_of`): its config file and argument, and a
  `--config.x=y` per field that differs."""
  name, parts = config_file(fig, config["model"]["num_layers"],
                            config["model"]["d_model"] * (8 if smoke else 1))
  arg = _argument(config, fig, parts, smoke)
  path = f"configs/{name}.py" + (f":{arg}" if arg else "")
  overrides = []
  try:
    base = json.loads(args_lib.load_config_file(
        REPO / "configs" / f"{name}.py", arg).to_json())
    overrides = [f"--config.{k}={_flag_value(v)}"
                 for k, v in _diff(base, config)]
  except (ValueError, OSError, KeyError) as e:
    path += f" (not rebuilt exactly: {e})"
  return " ".join(["python launch/train.py", f"--config {path}", *overrides,
                   f"--workdir {run_dir}"])


def _diff(base, new, prefix=""):
  out = []
  for k, v in new.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict) and isinstance(base.get(k), dict):
      out += _diff(base[k], v, key + ".")
    elif base.get(k, object()) != v:
      out.append((key, v))
  return out


def _flag_value(v):
  """A `--config.x=` value: a tuple as the shell should pass it, quoted."""
  if isinstance(v, (list, tuple)):
    return '"(' + ", ".join(repr(x) for x in v) + ("," * (len(v) == 1)) + ')"'
  return repr(v) if isinstance(v, str) and not v else str(v)


def by_run(runs) -> dict[str, str]:
  """Run directory -> its command as today's code runs it (`as_run_today`
  of the command its record kept, or of one rebuilt from its config), once
  per run of `runs` (`run_cells.Run`)."""
  out = {}
  for r in runs:
    if r.run_dir not in out:
      trained = r.trained_command or config_command(
          r.config, r.run_dir, r.figure, r.smoke)
      out[r.run_dir] = as_run_today(trained)
  return out
