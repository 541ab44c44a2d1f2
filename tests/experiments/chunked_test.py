"""Tests for qkspec.experiments.chunked: chunked calls equal one whole call."""
from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.experiments import chunked


class ChunkedTest(parameterized.TestCase):

  @parameterized.parameters(1, 3, 7, 8)
  def test_map_chunks_equals_one_unchunked_call(self, chunk):
    calls = []

    @jax.jit
    def fn(a_P, b_Px2):
      return dict(x=2 * a_P + b_Px2[:, 0],
                  y=jnp.stack([a_P, b_Px2[:, 1] ** 2], axis=-1))

    def counted(*args):
      calls.append(args[0].shape)
      return fn(*args)

    a = np.arange(7, dtype=np.float32)                  # odd: padded
    b = np.arange(14, dtype=np.float32).reshape(7, 2)
    out = chunked.map_chunks(counted, (a, b), chunk, "test")
    chex.assert_trees_all_equal(out, jax.tree.map(np.asarray, fn(a, b)))
    self.assertEqual(calls, [(chunk,)] * -(-7 // chunk))

  def test_pad_points_repeats_the_last_point(self):
    (a, b), num_chunks = chunked.pad_points(
        (np.arange(5), np.arange(10).reshape(5, 2)), 3)
    self.assertEqual(num_chunks, 2)
    np.testing.assert_array_equal(a, [0, 1, 2, 3, 4, 4])
    np.testing.assert_array_equal(b[-2:], [[8, 9], [8, 9]])
    with self.assertRaisesRegex(ValueError, "rows"):
      chunked.pad_points((np.arange(5), np.arange(4)), 3)


if __name__ == "__main__":
  absltest.main()
