"""Tests for qkspec.data.synthetic: Dong's sorting and memorisation tasks."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.data import synthetic


class GeneratorTest(absltest.TestCase):

  def test_sorting_targets_are_the_sorted_inputs(self):
    b = synthetic.sorting(jax.random.key(0), 200, 7, 5)
    x, y = np.asarray(b["inputs"]), np.asarray(b["targets"])
    self.assertEqual(x.shape, (200, 7))
    self.assertEqual(x.dtype, np.int32)
    self.assertTrue((np.diff(y, axis=1) >= 0).all())
    np.testing.assert_array_equal(np.sort(x, axis=1), y)
    self.assertEqual((x.min(), x.max()), (0, 4))        # all of {0..V-1}
    # i.i.d. uniform: each token about 1/V of the time.
    np.testing.assert_allclose(np.bincount(x.ravel()) / x.size, 0.2,
                               atol=0.03)
    self.assertTrue((x[:, 1:] != x[:, :-1]).any())      # not pre-sorted
    self.assertFalse((x == y).all(axis=1).mean() > 0.05)

  def test_sorting_is_a_function_of_the_key(self):
    a = synthetic.sorting(jax.random.key(3), 4, 6, 9)
    b = synthetic.sorting(jax.random.key(3), 4, 6, 9)
    c = synthetic.sorting(jax.random.key(4), 4, 6, 9)
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
    self.assertFalse(np.array_equal(a["inputs"], c["inputs"]))

  def test_memorization_draws_bank_rows_with_independent_labels(self):
    bank = synthetic.memorization_bank(jax.random.key(0), 50, 6, 7)
    self.assertEqual(bank["inputs"].shape, (50, 6))
    self.assertEqual(bank["targets"].shape, (50, 6))
    for v in bank.values():
      self.assertTrue(((v >= 0) & (v < 7)).all())
    # Labels are not a function of the inputs (not, e.g., sorted inputs).
    self.assertLess(float(jnp.mean(bank["targets"] == bank["inputs"])), 0.3)
    batch = synthetic.memorization(jax.random.key(1), bank, 30)
    rows = {tuple(r) for r in np.asarray(bank["inputs"]).tolist()}
    for xi, yi in zip(np.asarray(batch["inputs"]),
                      np.asarray(batch["targets"])):
      self.assertIn(tuple(xi.tolist()), rows)
      i = [j for j, r in enumerate(np.asarray(bank["inputs"]).tolist())
           if r == xi.tolist()][0]
      np.testing.assert_array_equal(yi, bank["targets"][i])

  def test_bad_sizes_raise(self):
    with self.assertRaisesRegex(ValueError, "seq_len"):
      synthetic.sorting(jax.random.key(0), 2, 0, 3)
    with self.assertRaisesRegex(ValueError, "num_sequences"):
      synthetic.memorization_bank(jax.random.key(0), 0, 3, 3)

  def test_token_accuracy(self):
    logits = jnp.eye(3)[None, [0, 1, 2, 2]]            # predicts 0,1,2,2
    self.assertAlmostEqual(float(synthetic.token_accuracy(
        logits, jnp.array([[0, 1, 2, 0]]))), 0.75)


if __name__ == "__main__":
  absltest.main()
