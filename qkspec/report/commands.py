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
"""
import ast
import pathlib
import shlex

from qkspec.config import args as args_lib
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
  out = dict(launcher=words[1], config=None, arg=None, overrides=[],
             workdir=None)
  flags = iter(words[2:])
  for word in flags:
    name, eq, value = word.partition("=")
    if not eq and name in ("--config", "--workdir"):
      value = next(flags, "")
    if name == "--config":
      out["config"], _, arg = value.partition(":")
      out["arg"] = arg or None
    elif name == "--workdir":
      out["workdir"] = value
    elif name.startswith("--config."):
      out["overrides"].append((name[len("--config."):], value))
    else:
      raise ValueError(f"{command!r}: unknown flag {word!r}.")
  return out


def _known(config) -> set[str]:
  return set(schema.flatten(config))


def retired(command: str) -> list[tuple[str, str]]:
  """The `--config.x=y` of `command` that today's config lacks."""
  c = parse(command)
  known = _known(_load(c))
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
  flags = {f"--config.{k}={v}" for k, v in gone}
  kept = [w for w in words if w not in flags]
  if any(PALLAS.get(k) == v for k, v in gone) and KERNELS not in kept:
    at = kept.index(next(w for w in kept if w.startswith("--config")))
    kept.insert(at + (1 if kept[at] == "--config" else 0) + 1, KERNELS)
  return shlex.join(kept)


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
