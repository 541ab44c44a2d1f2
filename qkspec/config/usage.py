"""The mistakes of a `--config file.py:ARG --config.x=y` command line, each
worded as one line, and the `--help` that lists the flags and the configs
with their arguments.
"""
import ast
import difflib
import os
import pathlib
import textwrap
from typing import Any

from qkspec.config import args
from qkspec.config.errors import ConfigError


def one_line(text: str) -> str:
  """`text`'s non-blank lines, stripped, joined by "; "."""
  return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def root(error: BaseException) -> BaseException:
  """The innermost error that `error` was raised from (or during)."""
  seen = []
  while error is not None and error not in seen:
    seen.append(error)
    error = error.__cause__ or (None if error.__suppress_context__
                                else error.__context__)
  return seen[-1]


def flag_error(error: Exception, value: str | None) -> str:
  """One line for a flag the parser refused; the `ConfigError` of the
  config's `:ARG` (`--config=value`) as `argument_error` words it."""
  cause = root(error)
  if isinstance(cause, ConfigError):
    return argument_error(value, cause)
  return one_line(str(error))


def unknown_field(config, field: str) -> str | None:
  """None if the dotted `field` is one of `config`, else one line naming
  it and the closest existing field."""
  parts, node = field.split("."), config
  for i, part in enumerate(parts):
    keys = [str(k) for k in node.keys()] if hasattr(node, "keys") else []
    if part in keys:
      node = node[part]
      continue
    line = f"--config.{field}: the config has no field {field!r}"
    near = difflib.get_close_matches(part, keys, 1, 0.75)
    if near:
      line += f"; did you mean --config.{'.'.join(parts[:i] + near)}" + (
          "".join(f".{p}" for p in parts[i + 1:]) + "?")
    return line
  return None


def first_unknown_field(value: str, fields: list[str]) -> str | None:
  """One line for the first of the overridden `fields` that the config of
  `--config=value` lacks; None if it has them all or cannot be loaded."""
  path, _, arg = value.partition(":")
  try:
    config = args.load_config_file(path, arg or None)
  except Exception:  # pylint: disable=broad-except
    return None      # the error at hand stands as it is
  lines = (unknown_field(config, field) for field in fields)
  return next((line for line in lines if line), None)


def argument_error(value: str | None, error: Exception) -> str:
  """One line for the `ConfigError` of a config's `:ARG`."""
  return f"--config={value}: {error}"


def load_error(value: str | None, error: Exception) -> str:
  """One line for a config file that could not be read."""
  path = (value or "").split(":", 1)[0]
  if not os.path.exists(path):
    return (f"--config={value}: no such file {path!r} (looked for "
            f"{os.path.abspath(path)})")
  return f"--config={value}: cannot load {path!r}: {one_line(str(root(error)))}"


def missing_config(launcher: str) -> str:
  """The line for a command without --config."""
  return (f"--config is required: python {launcher} --config "
          "configs/<name>.py --workdir DIR (--help lists the configs)")


def help_text(doc: str, flags: list[Any], extra: list[str]) -> str:
  """`doc`, then each of `flags` (absl's: name, boolean, help, default,
  default_as_str) on its lines, then `extra`'s lines."""
  lines = [doc.strip(), "", "flags:"]
  for f in flags:
    text = f"--{'[no]' if f.boolean else ''}{f.name}: {f.help}" + (
        "" if f.default in (None, False) else
        f" (default: {f.default_as_str})")
    lines.append(textwrap.fill(text, 79, initial_indent="  ",
                               subsequent_indent="      "))
  return "\n".join(lines + extra)


def config_help(configs_dir: str | pathlib.Path,
                training_only: bool) -> list[str]:
  """The lines --help adds about the configs (`config_lines`)."""
  return ["", textwrap.fill(
      f"configs in {configs_dir} (their arguments after a colon, comma-"
      "separated: a name sets a flag, name=value a value):", 79)
          ] + config_lines(configs_dir, training_only)


def config_lines(configs_dir: str | pathlib.Path,
                 training_only: bool) -> list[str]:
  """Two lines per config file of `configs_dir` (only training configs,
  those with `config.task`, if `training_only`): its name and title, then
  its `:ARG` arguments with their defaults."""
  out = []
  for path in sorted(pathlib.Path(configs_dir).glob("*.py")):
    if path.stem == "__init__" or (
        training_only and "task" not in args.load_config_file(path)):
      continue
    title = (ast.get_docstring(ast.parse(path.read_text())) or "").split(
        "\n")[0]
    out.append(f"  {path.name}  {title.partition(': ')[2] or title}")
    arguments = " ".join(_argument(k, v)
                          for k, v in args.arguments(path).items())
    out.append(textwrap.fill(f":{arguments}", 79, initial_indent=" " * 6,
                             subsequent_indent=" " * 7)
               if arguments else "      (no arguments)")
  return out


def _argument(name: str, default: Any) -> str:
  """"smoke" for a bool (set by naming it), else "seeds=1",
  "kappa2=0,0.001"."""
  if isinstance(default, bool):
    return name
  if isinstance(default, tuple):
    return f"{name}=" + ",".join(map(_number, default))
  return f"{name}={default}"


def _number(v) -> str:
  return f"{v:g}" if isinstance(v, float) else str(v)
