"""Tests for qkspec.training.metric_writer: JSONL records, TensorBoard files."""
import os
import tempfile
import time

from absl.testing import absltest
import numpy as np

from qkspec.training import metric_writer


class MetricWriterTest(absltest.TestCase):

  def test_jsonl_round_trip(self):
    with tempfile.TemporaryDirectory() as tmp:
      with metric_writer.MetricWriter(tmp) as w:
        w.write_hparams({"lr": 0.1})
        w.write_scalars(0, {"a": 1.0})
        w.write_arrays(0, {"rho": np.array([0.5, 1.0])})
        w.write_scalars(2, {"a": float("nan")})
        w.write_scalars(2, {"a": 3.0})         # rewritten step: last wins
      m = metric_writer.read_metrics(tmp)
    np.testing.assert_array_equal(m["a"][0], [0, 2])
    np.testing.assert_array_equal(m["a"][1], [1.0, 3.0])
    np.testing.assert_array_equal(m["rho"][1], [[0.5, 1.0]])

  def test_drop_records_after_a_step_rewrites_atomically(self):
    with tempfile.TemporaryDirectory() as tmp:
      with metric_writer.MetricWriter(tmp) as w:
        for s in (0, 1, 2, 3):
          w.write_scalars(s, {"a": float(s)})
      with open(os.path.join(tmp, metric_writer.JSONL), "a") as f:
        f.write('{"step": 4, "a"')                # cut short by a kill
      self.assertEqual(metric_writer.drop_records_after(tmp, 1), 3)
      self.assertEqual(metric_writer.drop_records_after(tmp, 1), 0)
      self.assertFalse([f for f in os.listdir(tmp) if ".tmp" in f])
      with metric_writer.MetricWriter(tmp) as w:
        w.write_scalars(2, {"a": 20.0})
      m = metric_writer.read_metrics(tmp)
    np.testing.assert_array_equal(m["a"][0], [0, 1, 2])
    np.testing.assert_array_equal(m["a"][1], [0.0, 1.0, 20.0])

  def test_records_reach_disk_before_close(self):
    with tempfile.TemporaryDirectory() as tmp:
      w = metric_writer.MetricWriter(tmp)
      w.write_scalars(5, {"a": 2.0})
      m = metric_writer.read_metrics(tmp)      # a killed run keeps this
      w.close()
    np.testing.assert_array_equal(m["a"][0], [5])

  def test_tensorboard_events_when_installed(self):
    try:
      import tensorboard  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      self.skipTest("tensorboard is not installed (JSONL only)")
    # pylint: disable-next=g-import-not-at-top
    from tensorboard.backend.event_processing import event_accumulator
    with tempfile.TemporaryDirectory() as tmp:
      with metric_writer.MetricWriter(tmp) as w:
        for s in (1, 2, 3):
          w.write_scalars(s, {"train/loss": float(s)})
      self.assertTrue(any(f.startswith("events.out.tfevents")
                          for f in os.listdir(tmp)))
      # A run resumed from step 1 drops TensorBoard's steps >= 2. Event
      # files are read in name order: the second, then a per-process
      # counter that sorts "10" before "9", so the resumed writer starts
      # in a later second, as a resumed run does.
      second = int(time.time())
      while int(time.time()) == second:
        time.sleep(0.02)
      with metric_writer.MetricWriter(tmp, purge_step=2) as w:
        w.write_scalars(2, {"train/loss": 20.0})
      acc = event_accumulator.EventAccumulator(tmp)
      acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    self.assertEqual(got, [(1, 1.0), (2, 20.0)])


if __name__ == "__main__":
  absltest.main()
