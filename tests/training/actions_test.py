"""Tests for qkspec.training.actions: when an action is due, pending metrics."""
import types

from absl.testing import absltest
import numpy as np

from qkspec.training import actions


def _action(every, start, num_steps):
  run = types.SimpleNamespace(plan=types.SimpleNamespace(
      config=types.SimpleNamespace(num_steps=num_steps)))
  return actions.PeriodicAction(every, run, start)


class PeriodicActionTest(absltest.TestCase):

  def test_due_every_k_steps_after_the_start_and_at_the_last(self):
    a = _action(every=4, start=4, num_steps=10)
    self.assertEqual([s for s in range(12) if a.due(s)], [8, 10])

  def test_next_due_matches_due(self):
    for every, start, num_steps in ((4, 0, 10), (3, 5, 17), (1, 0, 3),
                                    (100, 0, 7)):
      a = _action(every, start, num_steps)
      for step in range(start, num_steps):
        want = next(s for s in range(step + 1, num_steps + 1) if a.due(s))
        self.assertEqual(a.next_due(step), want, (every, start, step))


class PendingTest(absltest.TestCase):

  def _pending(self):
    p = actions.Pending(["m0", "m1"], lambda: "the checkpoint at step 2")
    p.add(3, {"finite": np.array([True, True]), "loss": np.array([1., 2.])})
    p.add(4, {"finite": np.array([[True, True], [True, False]]),
              "loss": np.array([[3., 4.], [5., 6.]])}, count=2)
    return p

  def test_per_step_unstacks_a_multi_step_call(self):
    steps, loss = actions.Pending.per_step(self._pending().items, "loss")
    self.assertEqual(steps, [3, 4, 5])
    np.testing.assert_array_equal(loss, [[1, 2], [3, 4], [5, 6]])

  def test_check_finite_names_the_step_and_the_member(self):
    with self.assertRaisesRegex(
        FloatingPointError, r"at step 5 \(sweep member m1\).*Nothing past "
        r"it was saved: the checkpoint at step 2\."):
      self._pending().check_finite()

  def test_take_empties_it(self):
    p = self._pending()
    self.assertLen(p.take(), 2)
    self.assertEqual(p.take(), [])
    p.check_finite()                    # nothing pending: nothing to raise


if __name__ == "__main__":
  absltest.main()
