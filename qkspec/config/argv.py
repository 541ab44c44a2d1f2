"""The one parser of a launch command's words: `sys.argv` or a recorded
command line.

absl's grammar: `--name=value`; `--name value` for a flag that takes a
value; a bare `--name` or `--noname` for a boolean (`booleans` names
them); one dash works as two; `--` ends the flags. `--config.x.y=v`
overrides a field of the config that `--config` loads (ml_collections).
The command line reads its flags here before absl has parsed them (to
word a usage error), the report reads recorded launch commands, and
`launch/report.py` prints its own command without its run directories.
"""
import dataclasses
from typing import Collection, Sequence

_TRUE = ("true", "t", "1", "yes", "y")


@dataclasses.dataclass(frozen=True)
class Flag:
  """A flag as written: `name` without its dashes ("config",
  "config.data.manual_dir", "noverbose_errors"), its `value` (None for a
  bare boolean) and the `words` it took."""
  name: str
  value: str | None
  words: tuple[str, ...]


def parse(words: Sequence[str],
          booleans: Collection[str] = ()) -> tuple[list[Flag], list[str]]:
  """(the flags, the other words) of `words` (without the program)."""
  scanned = list(_scan(words, booleans))
  taken = {i for at, f in scanned for i in range(at, at + len(f.words))}
  return [f for _, f in scanned], [w for i, w in enumerate(words)
                                   if i not in taken]


def _scan(words: Sequence[str], booleans: Collection[str]):
  """(index of its first word, Flag) of each flag in `words`."""
  i = 0
  while i < len(words):
    word = words[i]
    if word == "--":                    # the rest are not flags
      return
    if not word.startswith("-") or word == "-":
      i += 1
      continue
    name, eq, value = word.lstrip("-").partition("=")
    bare = name[2:] if name.startswith("no") else name
    takes_next = (not eq and name not in booleans and bare not in booleans
                  and i + 1 < len(words)
                  and not words[i + 1].startswith("--"))
    if takes_next:
      yield i, Flag(name, words[i + 1], (word, words[i + 1]))
    else:
      yield i, Flag(name, value if eq else None, (word,))
    i += 2 if takes_next else 1


def value(flags: Sequence[Flag], name: str) -> str | None:
  """The value of the last `--name` (None if absent)."""
  return next((f.value for f in reversed(flags) if f.name == name), None)


def boolean(flags: Sequence[Flag], name: str) -> bool:
  """Whether the last `--name`, `--name=true` or `--noname` sets `name`."""
  for f in reversed(flags):
    if f.name == name:
      return f.value is None or f.value.lower() in _TRUE
    if f.name == f"no{name}":
      return False
  return False


def overrides(flags: Sequence[Flag], prefix: str = "config"
              ) -> list[tuple[str, str | None]]:
  """The (dotted field, value) of each `--config.x.y=v` (`--noconfig.x`:
  "False"), in order."""
  out = []
  for f in flags:
    negated = f.name.startswith(f"no{prefix}.")
    name = f.name[2:] if negated else f.name
    if name.startswith(f"{prefix}."):
      out.append((name[len(prefix) + 1:], "False" if negated else f.value))
  return out


def without(words: Sequence[str], names: Collection[str],
            booleans: Collection[str] = ()) -> list[str]:
  """`words` less the flags `names` (and their values)."""
  dropped = {i for at, f in _scan(words, booleans) if f.name in names
             for i in range(at, at + len(f.words))}
  return [w for i, w in enumerate(words) if i not in dropped]
