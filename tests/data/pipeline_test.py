"""Tests for qkspec.data.pipeline: reading splits, train and eval batches."""
import pathlib
import socket
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from qkspec.config import ConfigError
from qkspec.data import pipeline as qdata
from qkspec.data.wikitext2 import wikitext2
import testutil
import wikitext2_fixtures


_VALID_IDS = wikitext2_fixtures.WIKITEXT2_TINY_VALID_IDS
_T, _B = 4, 2  # 55 train tokens -> 13 blocks -> 6 steps per epoch
_config = wikitext2_fixtures.wikitext2_data_config


class PipelineTest(wikitext2_fixtures.BuiltWikitext2Tiny,
                   parameterized.TestCase):
  """The splits of the hand-written fixture (built once, in setUpClass)."""

  def test_missing_manual_dir_error_is_one_line_naming_the_files(self):
    with tempfile.TemporaryDirectory() as tmp:
      with self.assertRaises(ConfigError) as cm:
        qdata.load_splits(_config(tmp, pathlib.Path(tmp) / "nowhere"))
    msg = str(cm.exception)
    self.assertNotIn("\n", msg)
    self.assertIn("manual_dir=", msg)
    for names in wikitext2.FILE_NAMES.values():
      for name in names:
        self.assertIn(name, msg)

  def test_missing_manual_dir_is_an_error_even_when_data_is_built(self):
    missing = pathlib.Path(self._tmp) / "no_such_dir"
    with self.assertRaisesRegex(ConfigError,
                                f"manual_dir='{missing}': no such directory"):
      qdata.load_splits(_config(self._tmp, missing), verify_checksums=False)
    d = qdata.load_splits(_config(self._tmp, ""))        # built: read only
    np.testing.assert_array_equal(d.valid, _VALID_IDS)

  def test_offline_without_manual_dir_fails_at_once_naming_it(self):
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(
        wikitext2, "download_problem", return_value="s3: unreachable"):
      with self.assertRaisesRegex(
          ConfigError, r"^WikiText-2: not built in .* and cannot be "
          r"downloaded \(s3: unreachable\); --config.data.manual_dir takes"):
        qdata.load_splits(_config(tmp, ""))
    with mock.patch.object(socket, "create_connection",
                           side_effect=OSError(101, "Network unreachable")):
      self.assertEqual(wikitext2.download_problem(),
                       "s3.amazonaws.com: Network unreachable; "
                       "wikitext.smerity.com: Network unreachable")

  def test_smoke_reads_a_data_set_named_beside_it(self):
    c = testutil.get_config("locater_wt2", "smoke").data
    c.name, c.data_dir = "wikitext2", self._tmp     # built from the fixture
    np.testing.assert_array_equal(qdata.load_splits(c).valid, _VALID_IDS)

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


if __name__ == "__main__":
  absltest.main()
