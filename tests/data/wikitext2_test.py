"""Tests for qkspec.data.wikitext2: the tfds builder, tokenising; no download.

The fixture tests/data/testdata/wikitext2_tiny/ is hand-written in the
official format; its counts and ids (tests/wikitext2_fixtures.py) were
worked out by hand.
RealWikiText2Test builds the real WikiText-2 from ../shared/data/wikitext-2
(relative to the repo root; about 5 s) and skips cleanly when that copy is
absent.
"""
import contextlib
import io
import pathlib
import shutil
import tempfile
import time
from unittest import mock

from absl.testing import absltest
import numpy as np
import tensorflow_datasets as tfds

from qkspec.config import ConfigError
from qkspec.data import pipeline as qdata
from qkspec.data.wikitext2 import wikitext2
import testutil
import wikitext2_fixtures


_FIXTURE = wikitext2_fixtures.WIKITEXT2_TINY
_REAL = testutil.ROOT.parent / "shared" / "data" / "wikitext-2"
_VOCAB = wikitext2_fixtures.WIKITEXT2_TINY_VOCAB
_VALID_IDS = wikitext2_fixtures.WIKITEXT2_TINY_VALID_IDS
_TEST_IDS = wikitext2_fixtures.WIKITEXT2_TINY_TEST_IDS
_config = wikitext2_fixtures.wikitext2_data_config


class FixtureTest(wikitext2_fixtures.BuiltWikitext2Tiny, absltest.TestCase):
  """The builder on the hand-written fixture (built once, in setUpClass)."""

  def test_counts_vocab_and_ids_match_hand_computation(self):
    d = self.data
    self.assertEqual(d.vocab, tuple(_VOCAB))
    self.assertEqual((d.train.size, d.valid.size, d.test.size), (55, 23, 17))
    self.assertEqual(d.eos_id, 0)
    self.assertEqual(d.train.dtype, np.int32)
    np.testing.assert_array_equal(d.valid, _VALID_IDS)
    np.testing.assert_array_equal(d.test, _TEST_IDS)
    # Train ids re-tokenised directly from the file agree with the builder.
    lines = wikitext2.read_lines(_FIXTURE / "wiki.train.tokens")
    np.testing.assert_array_equal(d.train,
                                  wikitext2.encode_lines(lines, _VOCAB))

  def test_articles_and_vocab_metadata_via_tfds_data_source(self):
    src = tfds.data_source("wikitext2", data_dir=self._tmp)
    self.assertEqual(len(src["train"]), 2)  # "= = History = =" is a section
    self.assertEqual(src["train"][1]["title"], b"Gamma")
    builder = tfds.builder("wikitext2", data_dir=self._tmp)
    self.assertEqual(builder.info.metadata["vocab"], _VOCAB)
    self.assertEqual(builder.info.file_format.value, "array_record")

  def test_pytorch_file_names_give_the_same_data(self):
    with tempfile.TemporaryDirectory() as tmp:
      manual = pathlib.Path(tmp) / "manual"
      manual.mkdir()
      for split in ("train", "valid", "test"):
        shutil.copy(_FIXTURE / f"wiki.{split}.tokens", manual / f"{split}.txt")
      d = qdata.load_splits(_config(pathlib.Path(tmp) / "tfds", manual),
                            verify_checksums=False)
    self.assertEqual(d.vocab, self.data.vocab)
    for split in ("train", "valid", "test"):
      np.testing.assert_array_equal(d.split(split), self.data.split(split))

  def test_download_branch_without_network(self):
    """No manual_dir: the zip is "downloaded" (mocked, never fetched)."""
    infos = wikitext2.Wikitext2.url_infos  # checksums.tsv beside the builder
    self.assertEqual({i.checksum for i in infos.values()},
                     {wikitext2.ZIP_SHA256})
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(
        wikitext2, "download_problem", return_value=None):  # "online"
      extracted = pathlib.Path(tmp) / "extracted"
      shutil.copytree(_FIXTURE, extracted / "wikitext-2")
      with mock.patch.object(tfds.download.DownloadManager,
                             "download_and_extract",
                             return_value=extracted) as dl:
        d = qdata.load_splits(_config(pathlib.Path(tmp) / "a", ""),
                              verify_checksums=False)
      dl.assert_called_once_with(wikitext2.URLS[0])
      np.testing.assert_array_equal(d.valid, _VALID_IDS)
      with mock.patch.object(tfds.download.DownloadManager,
                             "download_and_extract",
                             side_effect=ConnectionError("offline")):
        with self.assertRaisesRegex(ConfigError, "download failed .*offline.*"
                                    "--config.data.manual_dir takes"):
          qdata.load_splits(_config(pathlib.Path(tmp) / "b", ""))

  def test_build_logs_one_line_without_progress_bars(self):
    out, err = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as tmp:
      with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with self.assertLogs(level="INFO") as logs:
          qdata.load_splits(_config(tmp, _FIXTURE), verify_checksums=False)
    printed = out.getvalue() + err.getvalue()
    self.assertNotIn("\x1b[", printed)                 # tqdm escape codes
    self.assertNotIn("Unknown size", printed + "\n".join(logs.output))
    self.assertTrue(any(f"building wikitext2 from {_FIXTURE} into {tmp}" in l
                        for l in logs.output), logs.output)

  def test_wrong_files_fail_checksum_verification(self):
    with self.assertRaisesRegex(ConfigError,
                                "wrong file contents.*not 9e9fa1ad"):
      wikitext2.find_token_files(_FIXTURE, verify_checksums=True)


class TokenizeTest(absltest.TestCase):

  def test_lines_like_pytorch_examples(self):
    self.assertEqual(wikitext2.tokenize_line(" \n"), ["<eos>"])
    self.assertEqual(wikitext2.tokenize_line(" a  b\tc \n"),
                     ["a", "b", "c", "<eos>"])
    self.assertEqual(wikitext2.build_vocab([" b a \n", " \n", " a c \n"]),
                     ["b", "a", "<eos>", "c"])
    with self.assertRaisesRegex(KeyError, "zebra"):
      wikitext2.encode_lines([" zebra \n"], ["<eos>"])

  def test_articles_concatenate_back_to_the_file(self):
    lines = wikitext2.read_lines(_FIXTURE / "wiki.train.tokens")
    arts = list(wikitext2.split_articles(lines))
    self.assertEqual([t for t, _ in arts], ["Alpha Beta", "Gamma"])
    self.assertEqual(sum((g for _, g in arts), []), lines)


@testutil.slow("builds the real WikiText-2 with tfds")
class RealWikiText2Test(absltest.TestCase):
  """Builds the real data set from the offline copy, where there is one."""

  def test_published_counts(self):
    if not all((_REAL / f"{s}.txt").is_file() for s in wikitext2.FILE_NAMES):
      self.skipTest(f"no WikiText-2 copy at {_REAL}")
    with tempfile.TemporaryDirectory() as tmp:
      t0 = time.perf_counter()
      d = qdata.load_splits(_config(tmp, _REAL))  # checksums verified
      build_s = time.perf_counter() - t0
      t0 = time.perf_counter()
      d2 = qdata.load_splits(_config(tmp, _REAL))  # prepared: read only
      read_s = time.perf_counter() - t0
      src = tfds.data_source("wikitext2", data_dir=tmp)
      articles = {k: len(v) for k, v in src.items()}
    print(f"\nWikiText-2 build {build_s:.1f} s, reload {read_s:.2f} s")
    self.assertEqual(articles, {"train": 600, "validation": 60, "test": 60})
    self.assertEqual((d.train.size, d.valid.size, d.test.size),
                     (2_088_628, 217_646, 245_569))
    self.assertEqual(d.vocab_size, 33_278)
    self.assertEqual(d.vocab[:3], ("<eos>", "=", "Valkyria"))
    np.testing.assert_array_equal(d2.test, d.test)
    self.assertLess(max(d.valid.max(), d.test.max()), d.vocab_size)
    b = qdata.train_batch(d, 10_000, seq_len=64, batch_size=64, seed=0)
    self.assertEqual(b["inputs"].shape, (64, 64))
    self.assertEqual(qdata.num_batches(d.train.size, 64, 64, train=True), 509)
    w = sum(b["weights"].sum() for b in qdata.eval_batches(
        d, "test", seq_len=64, batch_size=64))
    self.assertEqual(w, 245_569)


if __name__ == "__main__":
  absltest.main()
