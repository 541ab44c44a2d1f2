"""Tests for qkspec.training.device_feed: batches equal the host pipeline's."""
from absl.testing import absltest
from absl.testing import parameterized
import jax.numpy as jnp
import numpy as np

from qkspec.data import pipeline
from qkspec.training import device_feed


class DeviceFeedTest(parameterized.TestCase):
  """Gathered batches equal `qkspec.data.pipeline`'s, bit for bit."""

  def setUp(self):
    super().setUp()
    rng = np.random.default_rng(0)
    self.data = pipeline.LMData(
        vocab=tuple(f"w{i}" for i in range(9)) + ("<eos>",),
        train=rng.integers(0, 10, 203).astype(np.int32),
        valid=rng.integers(0, 10, 77).astype(np.int32),
        test=rng.integers(0, 10, 5).astype(np.int32))

  def test_train_batches_across_epochs(self):
    T, B, seed = 7, 4, 3
    steps_per_epoch = pipeline.num_batches(203, T, B, train=True)   # 7
    ids = []
    for step in range(2 * steps_per_epoch + 1):          # crosses 2 epochs
      want = pipeline.train_batch(self.data, step, seq_len=T, batch_size=B,
                                  seed=seed)
      block_ids = pipeline.train_block_ids(203, step, T, B, seed)
      got = device_feed.train_batch_at(
          jnp.asarray(self.data.train), jnp.asarray(block_ids, jnp.int32),
          seq_len=T, eos_id=self.data.eos_id)
      for k in want:
        np.testing.assert_array_equal(np.asarray(got[k]), want[k])
      ids.append(block_ids)
    # Block 0 (the one that starts with <eos>) is drawn in every epoch.
    first = np.concatenate(ids[:steps_per_epoch])
    self.assertIn(0, first)

  @parameterized.parameters("valid", "test")
  def test_eval_batches_with_padding(self, split):
    T, B = 8, 3
    n = pipeline.num_batches(self.data.split(split).shape[0], T, B,
                             train=False)
    tokens = jnp.asarray(self.data.split(split))
    for index in range(n + 1):                   # one past the end: empty
      got = device_feed.eval_batch_at(tokens, jnp.int32(index), seq_len=T,
                                      batch_size=B, eos_id=self.data.eos_id)
      if index < n:
        want = pipeline.eval_batch(self.data, split, index, seq_len=T,
                                   batch_size=B)
        for k in want:
          np.testing.assert_array_equal(np.asarray(got[k]), want[k])
      else:
        self.assertEqual(float(got["weights"].sum()), 0.0)
    total = sum(float(device_feed.eval_batch_at(
        tokens, jnp.int32(i), seq_len=T, batch_size=B,
        eos_id=self.data.eos_id)["weights"].sum()) for i in range(n))
    self.assertEqual(total, self.data.split(split).shape[0])


if __name__ == "__main__":
  absltest.main()
