"""tensorflow-datasets builder for WikiText-2 (word level, v1, with `<unk>`).

One example per Wikipedia article, in file order: `title` and `ids`
(int32[n], one `<eos>` per line), so a split's ids concatenate to its
token stream (2,088,628 / 217,646 / 245,569 tokens). The vocabulary
(33,278 tokens, `<eos>` = 0) is `info.metadata["vocab"]`. Write with
`file_format="array_record"`, read with `tfds.data_source`. The token files
come from the download config's `manual_dir`, else the official zip is
downloaded (checksums.tsv).

References:
  Merity, Xiong, Bradbury, Socher, Pointer Sentinel Mixture Models,
  arXiv:1609.07843 (2016).
"""
from __future__ import annotations

from typing import Any

from absl import logging
from etils import epath
import numpy as np
import tensorflow_datasets as tfds

from qkspec.data.wikitext2 import tokens

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
  MANUAL_DOWNLOAD_INSTRUCTIONS = tokens.expected_files_message(
      "the manual directory", "offline build")

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
    source = self._manual_dir or f"a download of {tokens.URLS[0]}"
    logging.info("building wikitext2 from %s into %s (once; later runs read "
                 "it)", source, self.data_dir)

  def _log_download_done(self) -> None:
    logging.info("built wikitext2 in %s", self.data_dir)

  def _source_dir(self, dl_manager: tfds.download.DownloadManager) -> str:
    if self._manual_dir:
      return self._manual_dir
    errors = []
    for url in tokens.URLS:
      try:
        path = epath.Path(dl_manager.download_and_extract(url))
        return str(path / tokens.ZIP_SUBDIR)
      except Exception as e:  # pylint: disable=broad-except
        errors.append(f"{url}: {type(e).__name__}: {e}")
    raise FileNotFoundError(
        tokens.expected_files_message(
            "no manual_dir", "the download failed and no files were given")
        + "\nDownload errors:\n" + "\n".join(errors))

  def _split_generators(self, dl_manager: tfds.download.DownloadManager):
    root = self._source_dir(dl_manager)
    files = tokens.find_token_files(
        root, verify_checksums=self._verify_checksums)
    lines = {split: tokens.read_lines(path) for split, path in files.items()}
    vocab = tokens.build_vocab(lines["train"])
    self.info.metadata["vocab"] = vocab
    self.info.metadata["eos_id"] = vocab.index(tokens.EOS)
    self.info.metadata["tokenization"] = (
        "pytorch/examples word_language_model: line.split() + ['<eos>']; "
        "vocabulary = train tokens in order of first appearance")
    self.info.metadata["checksums_verified"] = self._verify_checksums
    return {tfds_split: self._generate_examples(lines[split], vocab)
            for tfds_split, split in _SPLITS.items()}

  def _generate_examples(self, lines: list[str], vocab: list[str]):
    """Yields (article index, {"title", "ids"}) in file order."""
    for i, (title, group) in enumerate(tokens.split_articles(lines)):
      ids = np.asarray(tokens.encode_lines(group, vocab), dtype=np.int32)
      yield i, {"title": title, "ids": ids}
