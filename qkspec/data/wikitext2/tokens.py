"""WikiText-2 token files: names, checksums, tokenisation, vocabulary.

Pure helpers of the tfds builder (`wikitext2.py`). Tokenisation is
pytorch/examples' `word_language_model/data.py`: each line split on
whitespace plus one `<eos>`; the vocabulary is the train tokens in order of
first appearance (`<eos>` = 0).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
import hashlib
import io
import os

EOS = "<eos>"
UNK = "<unk>"

# Split -> accepted file names: the official name, the pytorch/examples one.
FILE_NAMES = {
    "train": ("wiki.train.tokens", "train.txt"),
    "valid": ("wiki.valid.tokens", "valid.txt"),
    "test": ("wiki.test.tokens", "test.txt"),
}
# sha256 of the three token files.
SHA256 = {
    "train": "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
    "valid": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
    "test": "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
}
# The official archive: the URL most code cites, the author's current mirror
# (both in checksums.tsv).
URLS = (
    "https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-2-v1.zip",
    "https://wikitext.smerity.com/wikitext-2-v1.zip",
)
ZIP_SHA256 = "92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c"
ZIP_SUBDIR = "wikitext-2"


def expected_files_message(where: str, problem: str) -> str:
  """An error message naming the expected files and their sha256 checksums."""
  rows = "\n".join(
      f"  {split:5s}: {' or '.join(names):31s} sha256 {SHA256[split]}"
      for split, names in FILE_NAMES.items())
  return (
      f"WikiText-2: {problem} in {where}.\nExpected the three word-level v1 "
      f"token files (from wikitext-2-v1.zip, folder {ZIP_SUBDIR}/), each "
      f"under either name:\n{rows}\nPut them in one directory and pass it as "
      "`--config.data.manual_dir=DIR`.")


def sha256_file(path: os.PathLike[str] | str) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      h.update(chunk)
  return h.hexdigest()


def find_token_files(root: os.PathLike[str] | str, *,
                     verify_checksums: bool = True) -> dict[str, str]:
  """{"train": path, "valid": path, "test": path} in `root`.

  Raises FileNotFoundError for a missing `root` or file, ValueError for a
  sha256 other than `SHA256`'s (with `verify_checksums`).
  """
  root = os.fspath(root)
  if not os.path.isdir(root):
    raise FileNotFoundError(expected_files_message(
        repr(root), "directory does not exist"))
  found, missing = {}, []
  for split, names in FILE_NAMES.items():
    paths = [os.path.join(root, n) for n in names]
    hits = [p for p in paths if os.path.isfile(p)]
    if hits:
      found[split] = hits[0]
    else:
      missing.append(" / ".join(names))
  if missing:
    raise FileNotFoundError(expected_files_message(
        repr(root), "missing " + ", ".join(missing)))
  if verify_checksums:
    bad = [f"{p} has sha256 {digest}" for split, p in found.items()
           if (digest := sha256_file(p)) != SHA256[split]]
    if bad:
      raise ValueError(expected_files_message(
          repr(root), "wrong file contents (" + "; ".join(bad) + ")"))
  return found


def read_lines(path: os.PathLike[str] | str) -> list[str]:
  """The file's lines as text-mode iteration yields them (not
  `str.splitlines()`, which also splits on form feeds, U+2028, ...)."""
  with open(path, "rb") as f:
    text = f.read().decode("utf-8")
  return list(io.StringIO(text, newline=None))


def tokenize_line(line: str) -> list[str]:
  """Whitespace split plus one `<eos>`; " \\n" -> ["<eos>"]."""
  return line.split() + [EOS]


def build_vocab(lines: Iterable[str]) -> list[str]:
  """Distinct tokens of `lines` in order of first appearance (with `<eos>`)."""
  ids: dict[str, int] = {}
  for line in lines:
    for tok in tokenize_line(line):
      ids.setdefault(tok, len(ids))
  return list(ids)


def encode_lines(lines: Iterable[str], vocab: Sequence[str]) -> list[int]:
  """Token ids of `lines`, one `<eos>` per line; words missing from `vocab`
  map to `<unk>` if it has one, else KeyError."""
  index = {tok: i for i, tok in enumerate(vocab)}
  unk = index.get(UNK)
  out = []
  for line in lines:
    for tok in tokenize_line(line):
      i = index.get(tok, unk)
      if i is None:
        raise KeyError(f"token {tok!r} is not in the train vocabulary and the "
                       f"vocabulary has no {UNK}")
      out.append(i)
  return out


def split_articles(lines: Sequence[str]) -> Iterator[tuple[str, list[str]]]:
  """(title, lines) of each article; the groups concatenate back to `lines`.

  A title is a " = Title = " line (not " = = Section = = ") between two
  empty lines: the published 600 / 60 / 60 articles. "" before the first.
  """
  def blank(i):
    return i < 0 or i >= len(lines) or not lines[i].strip()

  def is_title(s):
    return (len(s) > 4 and s.startswith("= ") and s.endswith(" =")
            and not s.startswith("= ="))

  title, start = "", 0
  for i, line in enumerate(lines):
    if is_title(line.strip()) and blank(i - 1) and blank(i + 1):
      if title:
        yield title, list(lines[start:i])
        start = i
      title = line.strip()[2:-2].strip()
  if start < len(lines):
    yield title, list(lines[start:])
