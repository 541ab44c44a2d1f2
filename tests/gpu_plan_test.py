"""bench/gpu_paper.py's planning: run names, packed readings, projections.

The todo stage turns REPRODUCTION.md's list of missing runs into training
runs on a GPU slice; a slip here wastes GPU time no CPU test would see.
"""
import argparse
import json
import os
import sys
import tempfile
from unittest import mock

from absl.testing import absltest

from qkspec.config import schema
from qkspec.training import sweep
from qkspec.training import tasks

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import gpu_paper
# gpu_paper caches the data per process for its many probes; other tests
# in this process build other synthetic data under the same key.
tasks.load_lm_data = gpu_paper._load_lm_data  # pylint: disable=protected-access


def _todo(figure, reading, seed=0, kind="sweep"):
  return dict(figure=figure, reading=reading, seed=seed, kind=kind)


class Flags:
  manual_dir, tfds_dir, steps, pallas, k, rehearse = "", "/tmp/t", 8, "", 2, 0


class PairReadingsTest(absltest.TestCase):

  def test_both_readings_of_a_sweep_become_one_run_where_the_first_stood(
      self):
    runs = [_todo("6", "summed_loss", 1), _todo("6", "mean_loss", 1),
            _todo("8", "summed_loss"), _todo("8", "summed_loss", kind="none"),
            _todo("9", "summed_loss"), _todo("8", "mean_loss")]
    paired = gpu_paper.pair_readings(runs)
    self.assertEqual([{k: v for k, v in r.items() if k != "parts"}
                      for r in paired], [
                          _todo("6", "both", 1), _todo("8", "both"),
                          _todo("8", "summed_loss", kind="none"),
                          _todo("9", "summed_loss")])  # literal done: alone
    # a slice too short for the pair trains its parts instead
    self.assertEqual(paired[1]["parts"], [runs[2], runs[5]])
    self.assertNotIn("parts", paired[2])

  def test_names_and_configs_of_a_packed_run(self):
    name, extra = gpu_paper.run_spec(8, 1, "sweep", False, both=True)
    self.assertEqual((name, extra), ("fig8_both_seed1",
                                     {"both_readings": True, "seed": 1}))
    # fairseq is implied by both; a none run is the same under both
    self.assertEqual(gpu_paper.run_spec(8, 0, "sweep", True, both=True)[0],
                     "fig8_both")
    self.assertEqual(gpu_paper.run_spec(8, 0, "none", True, both=True)[0],
                     "fig8_fairseq_none")
    c = gpu_paper.fig_config(Flags, 8, "scan_bf16_pallas", **extra)
    schema.validate(c, num_devices=1)
    members = sweep.members(c)
    self.assertLen(members, 10)
    self.assertEqual({(m["seed"], m["penalty_added_to"]) for m in members},
                     {(1, "mean_loss"), (1, "summed_loss")})
    self.assertEqual(c.model.d_model, 32)

  def test_projection_counts_both_readings_members(self):
    rate = gpu_paper.FIVE_MEMBER_RATE
    one = gpu_paper.run_seconds(8, "sweep", 50_000, rate)
    both = gpu_paper.run_seconds(8, "sweep", 50_000, rate, readings=2)
    six = gpu_paper.run_seconds(8, "sweep", 50_000, rate, contrast=True)
    self.assertGreater(both, 1.5 * one)
    self.assertGreater(both, six)          # 10 members against 6
    self.assertLess(gpu_paper.run_seconds(7, "sweep", 50_000, rate,
                                          readings=2), six)  # 3 members

  def test_todo_trains_the_pair_or_else_its_parts(self):
    calls = []
    fake = lambda flags, path, fig, seed, kind, fairseq, rate, both=False: (
        calls.append((fig, seed, kind, fairseq, both)))
    with tempfile.TemporaryDirectory() as tmp:
      flags = argparse.Namespace(
          todo=os.path.join(tmp, "summary.json"), workdir=tmp, steps=50_000,
          rate=gpu_paper.PALLAS_RATE, both_readings=True,
          time_budget_s=1e9)
      with open(flags.todo, "w") as f:
        json.dump({"todo": [_todo("6", "summed_loss"),
                            _todo("6", "mean_loss")]}, f)
      for left_s, expected in (
          (1e4, [(6, 0, "sweep", False, True)]),          # the pair fits
          (400, [(6, 0, "sweep", True, False),            # 10 members: no;
                 (6, 0, "sweep", False, False)])):        # each reading: yes
        calls.clear()
        with mock.patch.object(gpu_paper, "train_run", fake), \
             mock.patch.object(gpu_paper, "left", lambda _, s=left_s: s):
          gpu_paper.todo(flags, "scan_bf16_pallas", None)
        self.assertEqual(calls, expected, left_s)


if __name__ == "__main__":
  absltest.main()
