"""Tests for qkspec.data and the wikitext2 tfds builder (never downloads).

The fixture tests/testdata/wikitext2_tiny/ is hand-written in the official
format; its counts and ids below were worked out by hand. RealWikiText2Test
builds the real WikiText-2 from ../shared/data/wikitext-2 (relative to the
repo root; about 5 s) and skips cleanly when that copy is absent.
"""
import contextlib
import io
import pathlib
import shutil
import tempfile
import time
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
import tensorflow_datasets as tfds

from qkspec.config import defaults
from qkspec.data import pipeline as qdata
from qkspec.data.wikitext2 import wikitext2
import testutil


_REPO = pathlib.Path(__file__).resolve().parent.parent
_FIXTURE = _REPO / "tests" / "testdata" / "wikitext2_tiny"
_REAL = _REPO.parent / "shared" / "data" / "wikitext-2"

# Train vocabulary in order of first appearance (by hand).
_VOCAB = ("<eos> = Alpha Beta The cat sat on the mat . dog <unk> History A "
          "and a Gamma of is 1 @,@ 000").split()
# valid: " \n", " = Beta = \n", " \n", " The cat and the dog sat . \n",
# " A mat is on the cat . \n", " \n".
_VALID_IDS = [0, 1, 3, 1, 0, 0, 4, 5, 15, 8, 11, 6, 10, 0,
              14, 9, 19, 7, 8, 5, 10, 0, 0]
# test: "zebra" and "mats" are not in train and become <unk> (12).
_TEST_IDS = [0, 1, 2, 1, 0, 0, 4, 12, 6, 7, 20, 21, 22, 12, 10, 0, 0]
_T, _B = 4, 2  # 55 train tokens -> 13 blocks -> 6 steps per epoch


def _config(data_dir, manual_dir):
  c = defaults.lm_config().data
  c.data_dir, c.manual_dir = str(data_dir), str(manual_dir)
  return c


class FixtureTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls._tmp = tempfile.mkdtemp()
    cls.data = qdata.load_splits(_config(cls._tmp, _FIXTURE),
                                 verify_checksums=False)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls._tmp, ignore_errors=True)
    super().tearDownClass()

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

  def test_missing_manual_dir_error_names_files_and_checksums(self):
    with tempfile.TemporaryDirectory() as tmp:
      with self.assertRaises(FileNotFoundError) as cm:
        qdata.load_splits(_config(tmp, pathlib.Path(tmp) / "nowhere"))
    msg = str(cm.exception)
    for split, names in wikitext2.FILE_NAMES.items():
      for name in names:
        self.assertIn(name, msg)
      self.assertIn(wikitext2.SHA256[split], msg)

  def test_download_branch_without_network(self):
    """No manual_dir: the zip is "downloaded" (mocked, never fetched)."""
    infos = wikitext2.Wikitext2.url_infos  # checksums.tsv beside the builder
    self.assertEqual({i.checksum for i in infos.values()},
                     {wikitext2.ZIP_SHA256})
    with tempfile.TemporaryDirectory() as tmp:
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
        with self.assertRaisesRegex(FileNotFoundError,
                                    "(?s)manual_dir.*offline"):
          qdata.load_splits(_config(pathlib.Path(tmp) / "b", ""))

  def test_missing_manual_dir_is_an_error_even_when_data_is_built(self):
    missing = pathlib.Path(self._tmp) / "no_such_dir"
    with self.assertRaisesRegex(FileNotFoundError,
                                f"manual_dir='{missing}' is no directory"):
      qdata.load_splits(_config(self._tmp, missing), verify_checksums=False)
    d = qdata.load_splits(_config(self._tmp, ""))        # built: read only
    np.testing.assert_array_equal(d.valid, _VALID_IDS)

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
    with self.assertRaisesRegex(ValueError,
                                "wrong file contents(.|\n)*sha256 9e9fa1ad"):
      wikitext2.find_token_files(_FIXTURE, verify_checksums=True)

  def test_train_blocks_are_contiguous_and_targets_shift_inputs(self):
    d = self.data
    stream = np.concatenate([[d.eos_id], d.train])  # s = [<eos>] + tokens
    steps = qdata.num_batches(d.train.size, _T, _B, train=True)
    self.assertEqual(steps, 6)
    seen = []
    for step in range(steps):  # one epoch
      b = qdata.train_batch(d, step, seq_len=_T, batch_size=_B, seed=3)
      self.assertEqual(b["inputs"].shape, (_B, _T))
      self.assertEqual(b["targets"].dtype, np.int32)
      np.testing.assert_array_equal(b["inputs"][:, 1:], b["targets"][:, :-1])
      for x, y in zip(b["inputs"], b["targets"]):
        j = [j for j in range(d.train.size // _T)
             if np.array_equal(stream[j * _T + 1:j * _T + _T + 1], y)]
        self.assertNotEmpty(j)
        np.testing.assert_array_equal(x, stream[j[0] * _T:j[0] * _T + _T])
        seen.append(j[0])
    # Each epoch visits distinct blocks (12 of the 13).
    ids = np.concatenate([qdata.train_block_ids(55, s, _T, _B, 3)
                          for s in range(steps)])
    self.assertLen(set(ids.tolist()), steps * _B)

  def test_train_batch_is_deterministic_in_seed_and_step(self):
    d, kw = self.data, dict(seq_len=_T, batch_size=_B)
    a = qdata.train_batch(d, 7, seed=0, **kw)
    b = qdata.train_batch(d, 7, seed=0, **kw)
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    epoch = lambda seed, e: np.concatenate([  # noqa: E731
        qdata.train_batch(d, s, seed=seed, **kw)["targets"]
        for s in range(6 * e, 6 * e + 6)])
    self.assertFalse(np.array_equal(epoch(0, 0), epoch(1, 0)))  # seeds
    self.assertFalse(np.array_equal(epoch(0, 0), epoch(0, 1)))  # epochs
    # Golden permutation, so a change of shuffling is noticed; update this
    # if the change was intended (it breaks resuming old runs).
    np.testing.assert_array_equal(
        qdata.epoch_permutation(0, 0, 13),
        [0, 11, 9, 1, 6, 3, 5, 4, 12, 10, 2, 8, 7])

  @parameterized.parameters(("valid", 4), ("test", 4), ("valid", 1),
                            ("test", 3))
  def test_eval_batches_cover_every_token_exactly_once(self, split, bsz):
    d = self.data
    batches = list(qdata.eval_batches(d, split, seq_len=_T, batch_size=bsz))
    tok = d.split(split)
    self.assertLen(batches, qdata.num_batches(tok.size, _T, bsz, train=False))
    for b in batches:
      self.assertEqual(b["weights"].shape, (bsz, _T))
    w = np.concatenate([b["weights"] for b in batches]).ravel()
    y = np.concatenate([b["targets"] for b in batches]).ravel()
    x = np.concatenate([b["inputs"] for b in batches]).ravel()
    self.assertEqual(w.sum(), tok.size)
    np.testing.assert_array_equal(w[:tok.size], 1)  # real targets come first
    np.testing.assert_array_equal(y[w > 0], tok)
    np.testing.assert_array_equal(x[w > 0], np.r_[d.eos_id, tok[:-1]])

  def test_per_host_shards_split_the_global_batch(self):
    d, kw = self.data, dict(seq_len=_T, batch_size=4)
    full = qdata.train_batch(d, 3, seed=1, process_index=0, process_count=1,
                             **kw)
    parts = [qdata.train_batch(d, 3, seed=1, process_index=p,
                               process_count=2, **kw) for p in range(2)]
    for p in parts:
      self.assertEqual(p["inputs"].shape, (2, _T))
    np.testing.assert_array_equal(
        np.concatenate([p["inputs"] for p in parts]), full["inputs"])
    full_eval = list(qdata.eval_batches(d, "valid", process_count=1,
                                        process_index=0, **kw))
    for p in range(2):
      part = list(qdata.eval_batches(d, "valid", process_index=p,
                                     process_count=2, **kw))
      for f, h in zip(full_eval, part):
        np.testing.assert_array_equal(h["weights"],
                                      f["weights"][2 * p:2 * p + 2])
    with self.assertRaisesRegex(ValueError, "split evenly"):
      qdata.host_rows(4, 0, 3)
    self.assertEqual(qdata.host_rows(4), slice(0, 4))  # this 1-process run


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

  def test_default_config_fields(self):
    c = defaults.lm_config().data
    self.assertEqual((c.name, c.seq_len, c.batch_size, c.seed),
                     ("wikitext2", 64, 64, 0))
    self.assertEqual((c.data_dir, c.manual_dir), ("", ""))


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
