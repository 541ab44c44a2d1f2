"""WikiText-2 (word level, v1, with `<unk>`) as a tensorflow-datasets builder.

Importing this module registers `Wikitext2`, so `tfds.builder("wikitext2")`
and `tfds.data_source("wikitext2")` work. One example per Wikipedia
article, in file order: `title` and `ids` (int32[n], one `<eos>` per line),
so a split's ids concatenate to its token stream (2,088,628 / 217,646 /
245,569 tokens). The vocabulary (33,278 tokens, `<eos>` = 0) is
`info.metadata["vocab"]`. Write with `file_format="array_record"`, read
with `tfds.data_source`. The token files come from the download config's
`manual_dir`, else the official zip is downloaded (checksums.tsv).

Tokenisation is pytorch/examples' `word_language_model/data.py`: each line
split on whitespace plus one `<eos>`; the vocabulary is the train tokens in
order of first appearance (`<eos>` = 0).

References:
  Merity, Xiong, Bradbury, Socher, Pointer Sentinel Mixture Models,
  arXiv:1609.07843 (2016).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
import hashlib
import os
import socket
from typing import Any
from urllib import parse

from absl import logging
from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from qkspec.config import ConfigError
from qkspec.config import usage

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


def expected_files(where: str, problem: str) -> str:
  """One line: `where`, its `problem`, and what `manual_dir` must hold."""
  official, short = zip(*FILE_NAMES.values())
  return (f"{where}: {problem}; --config.data.manual_dir takes a directory "
          f"holding WikiText-2's word-level token files {', '.join(official)}"
          f" (or {', '.join(short)}), from wikitext-2-v1.zip.")


def _instructions() -> str:
  """The files and their sha256, for tfds's manual download note."""
  rows = "\n".join(
      f"  {split:5s}: {' or '.join(names):31s} sha256 {SHA256[split]}"
      for split, names in FILE_NAMES.items())
  return (f"Put the three word-level v1 token files (from wikitext-2-v1.zip, "
          f"folder {ZIP_SUBDIR}/) in one directory, each under either "
          f"name:\n{rows}\nand pass it as `--config.data.manual_dir=DIR`.")


def download_problem(timeout_s: float = 5.0) -> str | None:
  """None if a host of `URLS` accepts a connection within `timeout_s`,
  else why none does (so that an offline machine fails at once, where the
  download would retry for minutes)."""
  reasons = []
  for url in URLS:
    host = parse.urlsplit(url).hostname
    try:
      socket.create_connection((host, 443), timeout=timeout_s).close()
      return None
    except OSError as e:
      reasons.append(f"{host}: {e.strerror or e}")
  return "; ".join(reasons)


def sha256_file(path: os.PathLike[str] | str) -> str:
  with open(path, "rb") as f:
    return hashlib.file_digest(f, "sha256").hexdigest()


def find_token_files(root: os.PathLike[str] | str, *,
                     verify_checksums: bool = True) -> dict[str, str]:
  """{"train": path, "valid": path, "test": path} in `root`.

  Raises ConfigError for a missing `root` or file, or a sha256 other than
  `SHA256`'s (with `verify_checksums`).
  """
  root = os.fspath(root)
  if not os.path.isdir(root):
    raise ConfigError(expected_files(repr(root), "no such directory"))
  found, missing = {}, []
  for split, names in FILE_NAMES.items():
    paths = [os.path.join(root, n) for n in names]
    hits = [p for p in paths if os.path.isfile(p)]
    if hits:
      found[split] = hits[0]
    else:
      missing.append(" / ".join(names))
  if missing:
    raise ConfigError(expected_files(repr(root),
                                     "missing " + ", ".join(missing)))
  if verify_checksums:
    bad = [f"{os.path.basename(p)} has sha256 {digest}, not {SHA256[split]}"
           for split, p in found.items()
           if (digest := sha256_file(p)) != SHA256[split]]
    if bad:
      raise ConfigError(expected_files(
          repr(root), "wrong file contents (" + "; ".join(bad) + ")"))
  return found


def read_lines(path: os.PathLike[str] | str) -> list[str]:
  """The file's lines as text-mode iteration yields them (not
  `str.splitlines()`, which also splits on form feeds, U+2028, ...)."""
  with open(path, encoding="utf-8") as f:
    return list(f)


def tokenize_line(line: str) -> list[str]:
  """Whitespace split plus one `<eos>`; " \\n" -> ["<eos>"]."""
  return line.split() + [EOS]


def build_vocab(lines: Iterable[str]) -> list[str]:
  """Distinct tokens of `lines` in order of first appearance (with `<eos>`)."""
  return list(dict.fromkeys(tok for line in lines
                            for tok in tokenize_line(line)))


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


_CITATION = r"""@article{merity2016pointer,
  title={Pointer Sentinel Mixture Models},
  author={Merity, Stephen and Xiong, Caiming and Bradbury, James and
          Socher, Richard},
  journal={arXiv preprint arXiv:1609.07843},
  year={2016}
}"""

_DESCRIPTION = (
    "WikiText-2 (v1, word level, rare words as <unk>): one example per "
    "Wikipedia article, `ids` = token ids of its lines with one <eos> per "
    "line; the vocabulary is metadata['vocab'].")

_SPLITS = {"train": "train", "validation": "valid", "test": "test"}


class Wikitext2(tfds.core.GeneratorBasedBuilder):
  """WikiText-2 v1 token streams, one example per article."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {
      "1.0.0": "Articles of token ids; vocabulary in metadata.json.",
  }
  MANUAL_DOWNLOAD_INSTRUCTIONS = _instructions()

  def __init__(self, *, verify_checksums: bool = True, **kwargs: Any):
    """`kwargs` go to `tfds.core.GeneratorBasedBuilder` (`data_dir`, ...)."""
    self._verify_checksums = verify_checksums
    self._manual_dir: str | None = None
    super().__init__(**kwargs)

  def _info(self) -> tfds.core.DatasetInfo:
    return tfds.core.DatasetInfo(
        builder=self,
        description=_DESCRIPTION,
        features=tfds.features.FeaturesDict({
            "title": tfds.features.Text(),
            "ids": tfds.features.Tensor(shape=(None,), dtype=np.int32),
        }),
        homepage=("https://blog.salesforceairesearch.com/"
                  "the-wikitext-long-term-dependency-language-modeling-"
                  "dataset/"),
        citation=_CITATION,
        metadata=tfds.core.MetadataDict(),
        disable_shuffling=True,  # keep article order: the stream is ordered
        license="CC BY-SA (text from Wikipedia)",
    )

  def download_and_prepare(self, *, download_config=None, **kwargs) -> None:
    """As tfds's, remembering whether a manual_dir was given explicitly."""
    self._manual_dir = (
        str(download_config.manual_dir)
        if download_config is not None and download_config.manual_dir
        else None)
    super().download_and_prepare(download_config=download_config, **kwargs)

  # One log line each instead of tfds's "Downloading and preparing dataset
  # Unknown size ..." banners (printed even for local files).
  def _log_download_bytes(self) -> None:
    source = self._manual_dir or f"a download of {URLS[0]}"
    logging.info("building wikitext2 from %s into %s (once; later runs read "
                 "it)", source, self.data_dir)

  def _log_download_done(self) -> None:
    logging.info("built wikitext2 in %s", self.data_dir)

  def _source_dir(self, dl_manager: tfds.download.DownloadManager) -> str:
    if self._manual_dir:
      return self._manual_dir
    errors = []
    for url in URLS:
      try:
        path = epath.Path(dl_manager.download_and_extract(url))
        return str(path / ZIP_SUBDIR)
      except Exception as e:  # pylint: disable=broad-except
        errors.append(f"{url}: {type(e).__name__}: {usage.one_line(str(e))}")
    raise ConfigError(expected_files(
        "no manual_dir", "the download failed (" + "; ".join(errors) + ")"))

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    root = self._source_dir(dl_manager)
    files = find_token_files(root, verify_checksums=self._verify_checksums)
    lines = {split: read_lines(path) for split, path in files.items()}
    vocab = build_vocab(lines["train"])
    self.info.metadata["vocab"] = vocab
    self.info.metadata["eos_id"] = vocab.index(EOS)
    self.info.metadata["tokenization"] = (
        "pytorch/examples word_language_model: line.split() + ['<eos>']; "
        "vocabulary = train tokens in order of first appearance")
    self.info.metadata["checksums_verified"] = self._verify_checksums
    return {tfds_split: self._generate_examples(lines[split], vocab)
            for tfds_split, split in _SPLITS.items()}

  def _generate_examples(self, lines: list[str], vocab: list[str]):
    """Yields (article index, {"title", "ids"}) in file order."""
    for i, (title, group) in enumerate(split_articles(lines)):
      ids = np.asarray(encode_lines(group, vocab), dtype=np.int32)
      yield i, {"title": title, "ids": ids}
