"""bench/gpu_paper.py's planning: run names, packed readings and seeds,
projections from measured members curves.

The todo stage turns REPRODUCTION.md's list of missing runs into training
runs on a GPU slice; a slip here wastes GPU time no CPU test would see.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from unittest import mock

from absl.testing import absltest

from qkspec.config import schema
from qkspec.experiments import run_records
from qkspec.training import sweep
from qkspec.training import tasks

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import gpu_paper
import startup
# gpu_paper caches the data per process for its many probes; other tests
# in this process build other synthetic data under the same key.
tasks.load_lm_data = gpu_paper._load_lm_data  # pylint: disable=protected-access


def _todo(figure, reading, seed=0, kind="sweep"):
  return dict(figure=figure, reading=reading, seed=seed, kind=kind)


class Flags:
  manual_dir, tfds_dir, steps, pallas, k, rehearse = "", "/tmp/t", 8, "", 2, 0


def _todo_flags(tmp, **kw):
  return argparse.Namespace(**{
      "todo": os.path.join(tmp, "summary.json"), "workdir": tmp,
      "steps": 50_000, "rate": gpu_paper.PALLAS_RATE, "both_readings": True,
      "time_budget_s": 1e9, "pack_seeds": 3, "curves": "", "pallas": "",
      "plan_device": "", **kw})


def _trained(flags, todo, fields, left_s=1e9, finite=True,
             given_up=None) -> list[tuple]:
  """`fields` of each run the todo stage trains from the entries `todo`
  with `left_s` seconds left (train_run faked, each run ending `finite`;
  the names todo gives up on appended to `given_up`)."""
  with open(flags.todo, "w") as f:
    json.dump({"todo": todo}, f)
  calls = []
  fake = lambda flags, path, rate, **r: calls.append(  # noqa: E731
      tuple(r[k] for k in fields)) or finite
  with mock.patch.object(gpu_paper, "train_run", fake), \
       mock.patch.object(gpu_paper, "left", lambda _: left_s):
    names = gpu_paper.todo(flags, "scan_bf16_pallas", None)
  if given_up is not None:
    given_up += names
  return calls


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
    with tempfile.TemporaryDirectory() as tmp:
      flags = _todo_flags(tmp)
      todo = [_todo("6", "summed_loss"), _todo("6", "mean_loss")]
      fields = ("fig", "seed", "kind", "fairseq", "both")
      for left_s, expected in (
          (1e4, [(6, 0, "sweep", False, True)]),          # the pair fits
          (400, [(6, 0, "sweep", True, False),            # 10 members: no;
                 (6, 0, "sweep", False, False)])):        # each reading: yes
        self.assertEqual(_trained(flags, todo, fields, left_s), expected,
                         left_s)

  def test_todo_returns_the_runs_given_up_and_goes_on(self):
    # A run not finite after its retries (train_run False): named for
    # main's exit status, and the next run still trains.
    with tempfile.TemporaryDirectory() as tmp:
      flags = _todo_flags(tmp, both_readings=False)
      todo = [_todo("8", "summed_loss"), _todo("9", "summed_loss")]
      given_up = []
      self.assertLen(_trained(flags, todo, ("fig",), finite=False,
                              given_up=given_up), 2)
      self.assertEqual(given_up, ["fig8_fairseq", "fig9_fairseq"])
      given_up = []
      _trained(flags, todo, ("fig",), given_up=given_up)
      self.assertEqual(given_up, [])

  def test_a_part_trained_by_an_earlier_call_here_is_not_trained_again(
      self):
    """A slice's first call fit only the pair's fairseq part; its second
    call, on the same machine, trains the literal part alone."""
    with tempfile.TemporaryDirectory() as tmp:
      flags = _todo_flags(tmp)
      todo = [_todo("8", "summed_loss"), _todo("8", "mean_loss"),
              _todo("9", "summed_loss"), _todo("9", "mean_loss")]
      fields = ("fig", "seed", "kind", "fairseq", "both")
      for name, step in (("fig8_fairseq", "50000"), ("fig9", "250")):
        os.makedirs(os.path.join(tmp, name, "ckpt", step))
      self.assertEqual(_trained(flags, todo, fields), [
          (8, 0, "sweep", False, False),  # the part not yet trained
          (9, 0, "sweep", True, False),   # fig9 (begun) resumes beside
          (9, 0, "sweep", False, False)])  # its other part
      # a part of a part: the pair inside a 3-seed pack
      pack = dict(_todo("8", "both"), seeds=3, contrast=True, parts=[
          dict(_todo("8", "both"), parts=todo[:2])])
      self.assertTrue(gpu_paper._started(flags, pack))  # pylint: disable=protected-access
      self.assertFalse(gpu_paper._started(flags, _todo("10", "mean_loss")))  # pylint: disable=protected-access


# Members curves {N: steps/s} of a model whose step is bound by fixed costs
# (members nearly free) and of one whose step grows with its members.
FLAT = {1: 1000.0, 5: 950.0, 15: 900.0, 30: 850.0}
LINEAR = {1: 1000.0, 5: 200.0, 15: 1000 / 15, 30: 1000 / 30}


class MeasuredCurveTest(absltest.TestCase):

  def test_step_time_interpolates_the_measured_points(self):
    curve = {1: 1000.0, 5: 500.0, 15: 200.0}          # 1, 2, 5 ms a step
    for n, ms in ((1, 1.0), (3, 1.5), (5, 2.0), (10, 3.5), (15, 5.0),
                  (33, 5.0 + 18 * 0.3)):              # beyond: last segment
      self.assertAlmostEqual(gpu_paper.step_seconds(curve, n), ms / 1e3,
                             msg=n)
    # below the smallest measured N: its time (an upper bound); beyond the
    # largest, never below its time, even where noise bends the curve down
    self.assertAlmostEqual(gpu_paper.step_seconds({5: 500.0, 15: 200.0}, 1),
                           2e-3)
    self.assertAlmostEqual(gpu_paper.step_seconds({1: 500.0, 5: 600.0}, 30),
                           1 / 600)

  def test_one_point_bounds_fewer_members_and_keeps_its_throughput(self):
    # a sweep's five members at 500 steps/s (2 ms a step): fewer members
    # never slower, more at its 2,500 member-steps/s
    for n, ms in ((1, 2.0), (5, 2.0), (6, 2.4), (15, 6.0)):
      self.assertAlmostEqual(gpu_paper.step_seconds({5: 500.0}, n),
                             ms / 1e3, msg=n)

  def test_saturation_is_the_fewest_members_near_the_most_throughput(self):
    # H200, scan_bf16_pallas_fa3 (bench/gpu_results.md (9)): member-steps/s
    # 1158 / 2022 / 2117 / 2123 at d = 128, 1370 / 3202 / 3896 / 4068 at 32
    d128 = {1: 1158.1, 5: 404.3, 15: 141.1, 30: 70.8}
    d32 = {1: 1370.0, 5: 640.4, 15: 259.7, 30: 135.6}
    self.assertEqual(gpu_paper.saturation(d128), 5)
    self.assertEqual(gpu_paper.saturation(d32), 15)
    self.assertEqual(gpu_paper.saturation({1: 100.0, 5: 20.0}), 1)
    self.assertEqual(gpu_paper.saturation({1: 100.0, 5: 100.0}), 5)

  def test_a_run_reports_its_last_invocations_phases(self):
    with tempfile.TemporaryDirectory() as tmp:
      self.assertEqual(gpu_paper._last_phases(tmp),   # pylint: disable=protected-access
                       "compilation and evaluation included")
      with open(os.path.join(tmp, "run_info.jsonl"), "w") as f:
        for steps in (50.0, 20.4):
          f.write(json.dumps({"phases_s": {"compile": 6.0, "steps": steps}})
                  + "\n")
      self.assertEqual(gpu_paper._last_phases(tmp),   # pylint: disable=protected-access
                       "compile 6 s, steps 20 s")

  def test_train_path_overrides_the_probes_choice_with_its_own_rate(self):
    train_path = gpu_paper._train_path   # pylint: disable=protected-access
    flags, known = argparse.Namespace(train_path=""), {5: 400.0}
    with mock.patch.dict(gpu_paper.PROBED, {"scan_bf16_pallas_fa3": 404.3,
                                            "scan_bf16_pallas_fa3dw": 450.0}):
      self.assertEqual(train_path(flags, "scan_bf16_pallas_fa3dw", known),
                       ("scan_bf16_pallas_fa3dw", 400.0))
      flags.train_path = "scan_bf16_pallas_fa3"
      self.assertEqual(train_path(flags, "scan_bf16_pallas_fa3dw", known),
                       ("scan_bf16_pallas_fa3", 404.3))
      flags.train_path = "scan_bf16_pallas"         # not probed: --rate
      self.assertEqual(train_path(flags, "scan_bf16_pallas_fa3dw", known),
                       ("scan_bf16_pallas", None))

  def test_startup_stage_shortens_fig6_to_one_call(self):
    c = startup.one_call(gpu_paper.fig_config(Flags, 6, "scan_bf16_pallas"),
                         250)
    self.assertEqual((c.num_steps, c.log_every, c.eval_every,
                      c.checkpoint_every), (250, 250, 250, 250))
    self.assertEqual(c.steps_per_call, 2)      # Flags.k, as the runs'
    c = startup.one_call(gpu_paper.fig_config(Flags, 6, "scan_bf16_pallas"),
                         1)
    self.assertEqual((c.num_steps, c.steps_per_call), (1, 1))  # k <= steps
    schema.validate(c)

  def test_startup_alternates_precompile_and_compares_medians(self):
    seen, lines = [], []

    def one_run(config, pre):
      seen.append(pre)
      wall = {False: [40.0, 44.0, 41.0], True: [36.0, 30.0, 37.0]}[pre]
      return wall[seen.count(pre) - 1], {"setup": 1.0, "compile": 2.0}

    with mock.patch.object(startup, "one_run", one_run):
      off, on = startup.compare(lambda: None, 3, "Fig. 6", lines.append)
    self.assertEqual(seen, [False, True] * 3)
    self.assertEqual((off, on), (41.0, 36.0))
    self.assertEqual(lines[0], "startup run 0 precompile=off   40.0 s: "
                     "setup 1.0, compile 2.0")
    self.assertEqual(lines[-1], "startup Fig. 6, median of 3: precompile "
                     "off 41.0 s, on 36.0 s; on / off = 0.88x (saves 5.0 s "
                     "a run)")

  def test_projection_takes_the_curve_and_its_layers(self):
    curve = {1: 1000.0, 5: 500.0, 15: 200.0}

    def want(n, layers):
      return (50_000 * gpu_paper.deeper(gpu_paper.step_seconds(curve, n),
                                        layers)
              * (1 + gpu_paper.EVAL_COST) + gpu_paper.RUN_OVERHEAD_S)

    for fig, kind, kw, n, layers in (
        (8, "sweep", {}, 5, 1), (9, "none", {}, 1, 3),
        (10, "sweep", dict(readings=2, contrast=True, seeds=3), 33, 6),
        (7, "sweep", dict(readings=2), 3, 1)):
      got = gpu_paper.run_seconds(fig, kind, 50_000, 1e-9, curve=curve, **kw)
      self.assertAlmostEqual(got, want(n, layers), msg=(fig, kw))
    # a curve of the figure's own depth needs no layer model, one of its
    # width at one layer takes it; Fig. 7 trains Fig. 6's model
    curves = {"L=6,d=32": curve, "L=1,d=32": {1: 1.0, 5: 2.0}}
    self.assertEqual(gpu_paper.curve_for(curves, 10)[:2], (curve, "L=6,d=32"))
    self.assertEqual(gpu_paper.curve_for(curves, 9)[1], "L=1,d=32")
    self.assertEqual(gpu_paper.curve_for(curves, 12)[:2], (None, ""))
    self.assertEqual(gpu_paper.curve_for({"L=1,d=128": curve}, 7)[1],
                     "L=1,d=128")
    self.assertAlmostEqual(
        gpu_paper.run_seconds(10, "sweep", 50_000, 1e-9, curve=curve,
                              curve_model="L=6,d=32"), want(5, 1))
    self.assertAlmostEqual(                         # 3 layers measured
        gpu_paper.run_seconds(10, "sweep", 50_000, 1e-9, curve=curve,
                              curve_model="L=3,d=32"),
        50_000 * gpu_paper.deeper(gpu_paper.step_seconds(curve, 5), 6, 3)
        * (1 + gpu_paper.EVAL_COST) + gpu_paper.RUN_OVERHEAD_S)
    # one point (a sweep's rate) is a curve too: its time at its five
    # members, and a contrast member's sixth at its member-steps/s
    rate = gpu_paper.FIVE_MEMBER_RATE
    for contrast, step_s in ((False, 1 / 250), (True, 6 / 5 / 250)):
      self.assertAlmostEqual(
          gpu_paper.run_seconds(8, "sweep", 50_000, rate, contrast,
                                curve={5: 250.0}, curve_model="L=1,d=32"),
          50_000 * step_s * (1 + gpu_paper.EVAL_COST)
          + gpu_paper.RUN_OVERHEAD_S)

  def test_layer_model_gives_the_measured_deeper_step(self):
    """`deeper` is exact at the measured depth, adds LAYER_COST of the
    one-layer step and LAYER_S a layer, and gives back the one deeper run
    timed (H200, bench/gpu_results.md (11)): Fig. 9's no-LocATER run, 81 s
    for 50,000 steps, from the d = 32 members curve at one layer."""
    for t, measured in ((1e-3, 1), (4e-3, 3), (9e-3, 6)):
      self.assertAlmostEqual(gpu_paper.deeper(t, measured, measured), t)
      self.assertAlmostEqual(
          gpu_paper.deeper(gpu_paper.deeper(t, 1, measured), measured), t)
    self.assertAlmostEqual(gpu_paper.deeper(2e-3, 3) - 2e-3, 2 * (
        gpu_paper.LAYER_COST * 2e-3 + gpu_paper.LAYER_S))
    d32 = {1: 1369.95, 5: 640.36, 15: 259.73, 30: 135.60}  # members_curves
    step = gpu_paper.run_step_seconds(9, "none", 1e-9, curve=d32,
                                      curve_model="L=1,d=32")
    self.assertAlmostEqual(step * 50_000, 81.0, delta=1.0)

  def test_layer_seconds_fitted_to_a_paths_curves(self):
    """A width measured at one layer and deeper gives the path's own
    seconds a layer: exact for curves that follow `deeper`, the most over
    N, never below zero; LAYER_S without such a pair; `curve_for` hands it
    to the projection of a depth no curve has (Fig. 12 from d = 128's one
    layer)."""
    base = {1: 1000.0, 5: 400.0}
    deep = lambda s, n=None: {  # noqa: E731
        k: 1 / gpu_paper.deeper(1 / r, 6, 1, s if n in (None, k) else 0.0)
        for k, r in base.items()}
    self.assertAlmostEqual(gpu_paper.layer_seconds(
        {"L=1,d=32": base, "L=6,d=32": deep(0.2e-3)}), 0.2e-3)
    self.assertAlmostEqual(gpu_paper.layer_seconds(        # the most
        {"L=1,d=32": base, "L=6,d=32": deep(0.3e-3, n=5)}), 0.3e-3)
    self.assertEqual(gpu_paper.layer_seconds(
        {"L=1,d=32": base, "L=6,d=32": {1: 2000.0, 5: 800.0}}), 0.0)
    self.assertEqual(gpu_paper.layer_seconds({"L=1,d=32": base}),
                     gpu_paper.LAYER_S)
    self.assertEqual(gpu_paper.layer_seconds({"L=6,d=32": base}),
                     gpu_paper.LAYER_S)
    curves = {"L=1,d=32": base, "L=6,d=32": deep(0.1e-3),
              "L=1,d=128": {1: 900.0, 5: 300.0}}
    curve, model, layer_s = gpu_paper.curve_for(curves, 12)
    self.assertEqual((model, round(layer_s, 9)), ("L=1,d=128", 0.1e-3))
    self.assertAlmostEqual(
        gpu_paper.run_step_seconds(12, "sweep", 1e-9, curve=curve,
                                   curve_model=model, layer_s=layer_s),
        gpu_paper.deeper(1 / 300.0, 6, 1, 0.1e-3))

  def test_fitted_layers_give_the_fewer_kernels_runs(self):
    """The fewer-kernels path on an H200 (bench/gpu_results.md (14)): its
    Fig. 10 curve against fa3's one-layer d = 32 curve fits ~0.07 ms a
    layer (fa3dw's: 0.415, the measured LAYER_S); Fig. 9's pair, trained on
    it in 162 s, then projects within 0-20% above."""
    fa3 = {"L=1,d=32": {1: 1369.95, 5: 640.36, 15: 259.73, 30: 135.60}}
    fa3dw = dict(fa3, **{"L=6,d=32": {1: 334.71, 5: 263.73}})
    fused = dict(fa3, **{"L=6,d=32": {1: 795.70, 5: 467.58}})
    self.assertAlmostEqual(gpu_paper.layer_seconds(fa3dw), 0.415e-3,
                           delta=0.005e-3)
    self.assertAlmostEqual(gpu_paper.layer_seconds(fused), 0.069e-3,
                           delta=0.005e-3)
    pair = gpu_paper.run_seconds(9, "sweep", 50_000, 1, False, 2, 1,
                                 *gpu_paper.curve_for(fused, 9))
    self.assertBetween(pair / 162.0, 1.0, 1.2)

  def test_a_path_takes_a_slower_paths_curves_until_its_own_are_measured(
      self):
    fa3 = {"1": 1000.0, "5": 500.0}
    own = {"1": 1100.0, "5": 550.0}
    ints = lambda c: {int(n): r for n, r in c.items()}  # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
      name = os.path.join(tmp, "curves.json")
      flags = _todo_flags(tmp, curves=name, plan_device="NVIDIA H200")
      for saved, want in (
          ({"scan_bf16_pallas_fa3": {"L=1,d=32": fa3}},
           {"L=1,d=32": fa3}),
          ({"scan_bf16_pallas_fa3": {"L=1,d=32": fa3, "L=6,d=32": fa3},
            "scan_bf16_pallas_fa3dw": {"L=6,d=32": own}},
           {"L=1,d=32": fa3, "L=6,d=32": own})):   # its own where measured
        with open(name, "w") as f:
          json.dump({"NVIDIA H200": saved}, f)
        self.assertEqual(
            gpu_paper.load_curves(flags, "scan_bf16_pallas_fa3dw"),
            {m: ints(c) for m, c in want.items()})
        # fewer kernels a layer, not timed yet: fa3dw's curves, or fa3's
        for path in ("scan_bf16_pallas_fa3dw_attn",
                     "scan_bf16_pallas_fa3dw_fused"):
          self.assertEqual(gpu_paper.load_curves(flags, path),
                           {m: ints(c) for m, c in want.items()})
      # the sublayer kernels, not timed yet: _fused's, where it has its own
      # (a sweep's point, the rate stage's), else as _fused
      saved["scan_bf16_pallas_fa3dw_fused"] = {"L=6,d=128": {"5": 301.8}}
      with open(name, "w") as f:
        json.dump({"NVIDIA H200": saved}, f)
      for path in ("scan_bf16_pallas_fa3dw_norms",
                   "scan_bf16_pallas_fa3dw_sublayer"):
        self.assertEqual(gpu_paper.load_curves(flags, path),
                         {"L=1,d=32": ints(fa3), "L=6,d=32": ints(own),
                          "L=6,d=128": {5: 301.8}})
      self.assertEqual(gpu_paper.load_curves(flags, "scan_bf16_pallas"), {})

  def test_every_path_is_a_valid_config_of_every_figure(self):
    for path in gpu_paper.PATHS:
      for fig in gpu_paper.FIGS:
        schema.validate(gpu_paper.fig_config(Flags, fig, path))

  def test_section_projection_splits_steps_from_the_rest(self):
    curve = {1: 1000.0, 5: 500.0, 15: 200.0}
    with tempfile.TemporaryDirectory() as tmp:
      with open(os.path.join(tmp, "curves.json"), "w") as f:
        json.dump({"NVIDIA H200": {"scan_bf16_pallas_fa3": {
            "L=1,d=32": {str(n): r for n, r in curve.items()}}}}, f)
      flags = _todo_flags(tmp, curves=os.path.join(tmp, "curves.json"),
                          plan_device="NVIDIA H200", figs="8,10",
                          runs="sweep,none", seeds=2, contrast=False)
      line = gpu_paper.projection(flags, 1e-9, "scan_bf16_pallas_fa3")
    steps = {(8, "sweep"): 50_000 / 500.0, (8, "none"): 50_000 / 1000.0}
    steps.update({(10, k): 50_000 * gpu_paper.deeper(s / 50_000, 6)
                  for (_, k), s in list(steps.items())})    # Fig. 10: L = 6
    wall = {r: s * (1 + gpu_paper.EVAL_COST) + gpu_paper.RUN_OVERHEAD_S
            for r, s in steps.items()}
    total = 2 * sum(wall.values()) / 60             # two seeds
    fig8 = 2 * (wall[8, "sweep"] + wall[8, "none"]) / 60
    fig10 = 2 * (wall[10, "sweep"] + wall[10, "none"]) / 60
    self.assertIn("4 sweep and 4 no-LocATER runs of 50,000 steps", line)
    self.assertIn(f"~{total:.1f} min, of which steps "
                  f"{2 * sum(steps.values()) / 60:.1f} and evaluation, "
                  f"compilation and setup "
                  f"{total - 2 * sum(steps.values()) / 60:.1f}", line)
    self.assertIn("members curves measured at L=1,d=32", line)
    self.assertTrue(line.endswith(f"by figure: 8 {fig8:.1f}, 10 "
                                  f"{fig10:.1f}"), line)

  def test_lanes_bound_the_section_between_their_longest_and_their_sum(self):
    by_fig = {6: 120.0, 8: 60.0, 11: 180.0}
    # at 1.1x 5 min of work take 4.5, 6 min 5.5, but never less than the
    # longest lane
    self.assertEndsWith(gpu_paper.lanes_text(by_fig, "6,8,11"),
                        "6.0 min, so the section ~6.0 min if they overlap "
                        "fully, ~6.0 if not at all, ~6.0 at the 1.1x two "
                        "MPS lanes gave on the H200")
    by_fig[6] = 60.0
    self.assertEqual(gpu_paper.lanes_text(by_fig, "6,11/8"),
                     "; in lanes 6,11 | 8: 4.0 | 1.0 min, so the section "
                     "~4.0 min if they overlap fully, ~5.0 if not at all, "
                     "~4.5 at the 1.1x two MPS lanes gave on the H200")
    by_fig[6] = 120.0
    self.assertEqual(gpu_paper.lanes_text(by_fig, "8/6/11"),
                     "; in lanes 8 | 6 | 11: 1.0 | 2.0 | 3.0 min, so the "
                     "section ~3.0 min if they overlap fully, ~6.0 if not "
                     "at all, ~5.5 at the 1.1x two MPS lanes gave on the "
                     "H200")
    self.assertEqual(gpu_paper.lanes_text(by_fig, ""), "")

  def test_curves_are_kept_by_device_path_and_pallas_setting(self):
    with tempfile.TemporaryDirectory() as tmp:
      brought = os.path.join(tmp, "brought.json")
      device = gpu_paper.jax.devices()[0].device_kind
      with open(brought, "w") as f:
        json.dump({device: {"scan_bf16_pallas": {
            "L=1,d=32": {"1": 1.0, "5": 2.0},
            "L=1,d=128": {"1": 3.0, "5": 4.0}}},
                   "NVIDIA H200": {"scan_bf16_pallas": {
                       "L=1,d=64": {"1": 5.0, "5": 6.0}}}}, f)
      flags = _todo_flags(tmp, curves=brought)
      self.assertEqual(gpu_paper.load_curves(flags, "scan_bf16_pallas"),
                       {"L=1,d=32": {1: 1.0, 5: 2.0},
                        "L=1,d=128": {1: 3.0, 5: 4.0}})
      # this machine's own measurement replaces the brought one
      gpu_paper.save_curve(flags, "scan_bf16_pallas", "L=1,d=32",
                           {1: 7.0, 5: 8.0})
      self.assertEqual(gpu_paper.load_curves(flags, "scan_bf16_pallas"),
                       {"L=1,d=32": {1: 7.0, 5: 8.0},
                        "L=1,d=128": {1: 3.0, 5: 4.0}})
      # ... and the workdir's file, brought home, replaces --curves whole:
      # it keeps the brought curves it did not measure, of every device
      with open(os.path.join(tmp, gpu_paper.CURVES_FILE)) as f:
        home = json.load(f)
      self.assertEqual(home["NVIDIA H200"], {"scan_bf16_pallas": {
          "L=1,d=64": {"1": 5.0, "5": 6.0}}})
      self.assertEqual(home[device]["scan_bf16_pallas"]["L=1,d=128"],
                       {"1": 3.0, "5": 4.0})
      # another device kind's curves, named (a plan listed on a CPU)
      flags.plan_device = "NVIDIA H200"
      self.assertEqual(gpu_paper.load_curves(flags, "scan_bf16_pallas"),
                       {"L=1,d=64": {1: 5.0, 5: 6.0}})
      flags.plan_device = ""
      # another path, or the same path at other Pallas blocks: not these
      self.assertEqual(gpu_paper.load_curves(flags, "scan_bf16_fused4096"),
                       {})
      flags.pallas = "128x128x8x2"
      self.assertEqual(gpu_paper.load_curves(flags, "scan_bf16_pallas"), {})
      self.assertEqual(gpu_paper.load_curves(
          flags, "scan_bf16_pallas_64x128x4x2"), {})      # pinned: no --pallas

  def test_rate_stage_keeps_each_sweep_as_its_models_point(self):
    """bench/xla_flags_ab.py's rates reach the section's projections:
    each figure's sweep rate, a one-point curve of its model at five
    members, replacing the curve the file had for that model."""
    with tempfile.TemporaryDirectory() as tmp:
      flags = _todo_flags(tmp, figs="12,10", probe_steps=10,
                          manual_dir="", tfds_dir=tmp, k=2, rehearse=0)
      gpu_paper.save_curve(flags, "scan_bf16_pallas", "L=6,d=32",
                           {1: 800.0, 5: 470.0})
      timed = {"L=6,d=128": (9.0, 301.8, 250, 6.9),
               "L=6,d=32": (7.0, 605.3, 250, 6.97)}
      with mock.patch.object(gpu_paper, "try_rate",
                             lambda flags, c, what: timed[
                                 f"L={c.model.num_layers},"
                                 f"d={c.model.d_model}"]):
        gpu_paper.rates(flags, "scan_bf16_pallas")
      self.assertEqual(gpu_paper.load_curves(flags, "scan_bf16_pallas"),
                       {"L=6,d=128": {5: 301.8}, "L=6,d=32": {5: 605.3}})


class ReportStageTest(absltest.TestCase):

  def test_the_report_covers_the_committed_records_and_the_slices_runs(self):
    committed = os.path.join(gpu_paper.ROOT, "reproduction", "records")
    with tempfile.TemporaryDirectory() as tmp:
      shutil.copytree(os.path.join(committed, "runs", "fig7"),
                      os.path.join(tmp, "fig7"))     # this slice's run
      with open(os.path.join(tmp, "fig7", "record.json")) as f:
        record = json.load(f)
      record["run_dir"] = os.path.join(tmp, "fig7")
      with open(os.path.join(tmp, "fig7", "record.json"), "w") as f:
        json.dump(record, f)
      gpu_paper.write_report(argparse.Namespace(workdir=tmp), committed)
      with open(os.path.join(tmp, "REPRODUCTION.md")) as f:
        md = f.read()
      records = os.path.join(tmp, "reproduction", "records")
      self.assertEqual(run_records.origin(os.path.join(records, "runs",
                                                       "fig7")),
                       os.path.join(tmp, "fig7"))    # the slice's, not ours
      self.assertLen(run_records.listed(records),
                     len(run_records.listed(committed)))
      self.assertIn(f"- run `{tmp}/fig7`:", md)
      self.assertIn("- run `runs/gpu_paper/fig6_seed1`:", md)
      self.assertIn("Generated by `python launch/report.py --out "
                    f"{tmp}/REPRODUCTION.md` from the run records in "
                    f"`{records}`", md)


def _stage_flags(tmp, **kw):
  """The flags the warm and train stages read."""
  return argparse.Namespace(**{
      "manual_dir": "", "tfds_dir": "/tmp/t", "steps": 8, "pallas": "",
      "k": 2, "rehearse": 0, "workdir": tmp, "figs": "7,9", "seeds": 1,
      "first_seed": 0, "runs": "sweep,none", "fairseq": False,
      "contrast": False, "both_readings": True, "time_budget_s": 1e9,
      **kw})


class WarmStageTest(absltest.TestCase):

  def _flags(self, tmp, **kw):
    return _stage_flags(tmp, **kw)

  def test_warm_compiles_nothing_without_the_time_to(self):
    with tempfile.TemporaryDirectory() as tmp:
      compiled, lines = [], []
      with mock.patch.object(gpu_paper.loop, "compile_programs",
                             compiled.append), \
           mock.patch.object(gpu_paper, "log", lines.append):
        gpu_paper.warm(self._flags(tmp, time_budget_s=20), "scan_bf16_pallas")
      self.assertEqual((compiled, lines), ([], ["warm: skipped (time budget)"]))

  def test_train_runs_skip_fig7s_none_run(self):
    flags = argparse.Namespace(figs="6,7", first_seed=1, seeds=2,
                               runs="sweep,none")
    self.assertEqual(gpu_paper.train_runs(flags),
                     [(6, 1, "sweep"), (6, 1, "none"), (6, 2, "sweep"),
                      (6, 2, "none"), (7, 1, "sweep"), (7, 2, "sweep")])

  def test_warm_compiles_the_unfinished_runs_train_builds(self):
    """The configs warm compiles are train_run's, for the runs not done
    (fig9_none finished here); a failed compile is logged, not raised."""
    with tempfile.TemporaryDirectory() as tmp:
      flags = self._flags(tmp)
      compiled, lines = [], []

      def compile_programs(c):
        compiled.append(c.to_dict())
        if c.model.num_layers == 3 and not c.sweep.kappa2:
          raise RuntimeError("no kernel")

      done = lambda wd: 8 if wd.endswith("fig9_none") else 0  # noqa: E731
      with mock.patch.object(gpu_paper.loop, "compile_programs",
                             compile_programs), \
           mock.patch.object(gpu_paper, "_steps_done", done), \
           mock.patch.object(gpu_paper, "log", lines.append):
        gpu_paper.warm(flags, "scan_bf16_pallas")
        self.assertCountEqual(compiled, [
            gpu_paper.fig_config(flags, fig, "scan_bf16_pallas",
                                 **gpu_paper.run_spec(fig, 0, kind, False,
                                                      False, True)[1]
                                 ).to_dict()
            for fig, kind in ((7, "sweep"), (9, "sweep"))])
        self.assertIn("fig7_both, fig9_both", lines[-1])
        self.assertEqual(lines[:-1], [])
        flags.runs = "none"
        done = lambda wd: 0  # noqa: E731
        with mock.patch.object(gpu_paper, "_steps_done", done):
          gpu_paper.warm(flags, "scan_bf16_pallas")
        self.assertStartsWith(lines[-2], "warm fig9_none: failed: "
                              "RuntimeError: no kernel")


class PrepareNextTest(absltest.TestCase):
  """train prepares each run on its thread, the next while one trains."""

  def _train(self, left_s=1e9, prepare_next=True, fail=()):
    """(run, what it was handed ready or None, whether the next run was
    being prepared while it trained) of each train_run call."""
    flags = _stage_flags("/w", figs="8,9,12", runs="sweep",
                         both_readings=False, prepare_next=prepare_next,
                         nan_retries=1)
    got, prepared_figs = [], []
    following = {8: 9, 9: 12}

    def prepare_run(flags, path, fig, seed, kind):
      del flags, path, seed, kind
      prepared_figs.append(fig)
      if fig in fail:
        raise RuntimeError("no kernel")
      return f"fig{fig} ready"

    def train_run(flags, path, fig, *args, prepared=None, plots=None):
      del flags, path, args
      self.assertEqual(plots is not None, prepare_next)
      ready = None
      if prepared is not None:
        try:
          ready = prepared.result()
        except RuntimeError as e:
          ready = str(e)
      deadline = time.time() + 1.0    # the thread prepares the next, if told
      while (fig in following and following[fig] not in prepared_figs
             and time.time() < deadline):
        time.sleep(0.01)
      got.append((fig, ready, following.get(fig) in prepared_figs))
      return True

    with mock.patch.object(gpu_paper, "prepare_run", prepare_run), \
         mock.patch.object(gpu_paper, "train_run", train_run), \
         mock.patch.object(gpu_paper, "left", lambda _: left_s), \
         mock.patch.object(gpu_paper, "log", lambda _: None):
      self.assertEqual(gpu_paper.train(flags, "scan_bf16_pallas"), [])
    return got

  def test_each_run_comes_prepared_and_the_next_is_prepared_meanwhile(self):
    """The first is prepared on the thread before the next, so its
    compilation is not shared with the next run's."""
    self.assertEqual(self._train(), [(8, "fig8 ready", True),
                                     (9, "fig9 ready", True),
                                     (12, "fig12 ready", False)])
    self.assertEqual(self._train(fail=(9,)), [(8, "fig8 ready", True),
                                              (9, "no kernel", True),
                                              (12, "fig12 ready", False)])

  def test_nothing_is_prepared_ahead_without_the_flag_or_the_time(self):
    self.assertEqual(self._train(prepare_next=False),
                     [(8, None, False), (9, None, False), (12, None, False)])
    # short of time: each run still prepared on the thread, none ahead
    self.assertEqual(self._train(left_s=gpu_paper.PREPARE_MIN_S), [
        (8, "fig8 ready", False), (9, "fig9 ready", False),
        (12, "fig12 ready", False)])

  def test_a_prepared_run_is_the_one_train_run_trains(self):
    """prepare_run builds the config and workdir train_run then passes to
    the loop (loop.train_and_evaluate refuses any other), and nothing for
    a finished run."""
    flags = _stage_flags("/w", figs="9", runs="sweep", both_readings=False)
    built = []
    with mock.patch.object(gpu_paper.loop, "prepare",
                           lambda c, wd: built.append((c.to_json(), wd))), \
         mock.patch.object(gpu_paper, "_steps_done", lambda wd: 0):
      gpu_paper.prepare_run(flags, "scan_bf16_pallas", 9, 0, "sweep")
    want = gpu_paper.fig_config(flags, 9, "scan_bf16_pallas").to_json()
    self.assertEqual(built, [(want, "/w/fig9")])
    with mock.patch.object(gpu_paper, "_steps_done", lambda wd: 8):
      self.assertIsNone(
          gpu_paper.prepare_run(flags, "scan_bf16_pallas", 9, 0, "sweep"))


class TrainResumingTest(absltest.TestCase):

  def _train(self, outcomes, retries):
    """train_resuming over a loop whose calls end as `outcomes` say
    (True: finished, False: not finite); (result, calls, log lines)."""
    calls, lines = [], []

    def fake(c, workdir, prepared=None):
      calls.append(workdir)
      self.assertEqual(prepared, "ready")
      if not outcomes[len(calls) - 1]:
        raise FloatingPointError(f"NaN at step {len(calls)}: the newest "
                                 "checkpoint is step 0.")

    with mock.patch.object(gpu_paper.loop, "train_and_evaluate", fake), \
         mock.patch.object(gpu_paper, "log", lines.append):
      ok = gpu_paper.train_resuming(None, "/w/fig12", "fig12", retries,
                                    "ready")
    return ok, calls, lines

  def test_a_nan_the_rerun_goes_past_costs_one_retry(self):
    ok, calls, lines = self._train([False, True], retries=1)
    self.assertTrue(ok)
    self.assertEqual(calls, ["/w/fig12"] * 2)
    self.assertEqual(lines, ["train fig12: NaN at step 1: the newest "
                             "checkpoint is step 0. Retrying from its newest "
                             "checkpoint (1 of 1, --nan_retries)."])

  def test_gives_up_after_the_retries(self):
    for retries in (0, 2):
      ok, calls, lines = self._train([False] * 3, retries)
      self.assertFalse(ok)
      self.assertLen(calls, retries + 1)
      self.assertEndsWith(lines[-1], f"Giving the run up after {retries} "
                          "retries; the next run goes on.")
    self.assertEqual(self._train([True], 0)[:2], (True, ["/w/fig12"]))

  def test_the_real_loop_resumes_after_its_error(self):
    """On the CPU a rerun repeats the overflow exactly: the loop, entered
    again in the same process after its FloatingPointError, resumes from
    the step-1 checkpoint and fails at step 1 again."""
    from configs import theory_task  # pylint: disable=g-import-not-at-top
    c = theory_task.get_config("smoke")
    c.sweep.kappa1, c.sweep.kappa2, c.sweep.target = (), (), ()
    c.update(dict(num_steps=6, log_every=3, checkpoint_every=1,
                  eval_every=100))
    c.opt.lr = 1e30          # step 0's update blows the weights up
    with tempfile.TemporaryDirectory() as tmp:
      lines = []
      with mock.patch.object(gpu_paper, "log", lines.append), \
           self.assertLogs("absl", "INFO") as logs:
        self.assertFalse(gpu_paper.train_resuming(c, tmp, "t", 1))
    self.assertIn("resumed from step 1", "\n".join(logs.output))
    self.assertLen(lines, 2)
    for line in lines:
      self.assertIn("at step 1:", line)
      self.assertIn("the newest checkpoint is step 1 (", line)


class PackSeedsTest(absltest.TestCase):

  def _seconds(self, curve):
    return lambda r: gpu_paper.run_seconds(
        int(r["figure"]), r["kind"], 50_000, 1e-9, r.get("contrast", False),
        2 if r["reading"] == "both" else 1, r.get("seeds", 1), curve)

  def test_cheap_members_pack_three_seeds_with_their_contrast(self):
    runs = gpu_paper.pair_readings([
        _todo("6", "summed_loss", 1), _todo("6", "mean_loss", 1),
        _todo("9", "summed_loss"), _todo("9", "summed_loss", kind="none"),
        _todo("9", "mean_loss"), _todo("10", "mean_loss")])
    packed = gpu_paper.pack_seeds(runs, 3, self._seconds(FLAT))
    self.assertEqual([(r["figure"], r["reading"], r["kind"],
                       r.get("seeds", 1), r.get("contrast", False))
                      for r in packed], [
                          ("6", "both", "sweep", 1, False),  # wants 3 seeds
                          ("9", "both", "sweep", 3, True),
                          ("10", "mean_loss", "sweep", 3, True)])
    # the sweep and the no-LocATER run it replaces, for a short slice
    self.assertEqual(packed[1]["parts"],
                     [runs[1], _todo("9", "summed_loss", kind="none")])
    self.assertEqual(packed[2]["parts"], [_todo("10", "mean_loss")])
    # members that cost what they weigh: nothing packed
    self.assertEqual(gpu_paper.pack_seeds(runs, 3, self._seconds(LINEAR)),
                     runs)
    # nor a pack longer than one device call (MAX_RUN_S), however cheap
    # its seeds
    seconds = self._seconds(FLAT)
    one_call = (seconds(packed[2]) + seconds(packed[2]["parts"][0])) / 2
    self.assertGreater(seconds(packed[2]), one_call)
    with mock.patch.object(gpu_paper, "MAX_RUN_S", one_call):
      self.assertEqual(gpu_paper.pack_seeds(runs, 3, seconds)[2],
                       _todo("10", "mean_loss"))

  def test_a_sweep_takes_its_no_locater_run_as_one_more_member(self):
    runs = gpu_paper.pair_readings([
        _todo("12", "summed_loss"), _todo("12", "summed_loss", kind="none"),
        _todo("12", "mean_loss"), _todo("10", "mean_loss")])
    pair, none, ten = runs
    shape = lambda rs: [(r["figure"], r["reading"], r["kind"],  # noqa: E731
                         r.get("seeds", 1), r.get("contrast", False))
                        for r in rs]
    wanted = [("12", "both", "sweep", 1, True),
              ("10", "mean_loss", "sweep", 1, False)]   # no none listed
    with mock.patch.object(gpu_paper, "MAX_RUN_S", 1e9):
      # members that cost what they weigh: three seeds cost 3x, but the
      # eleventh member costs a lone member's steps without its overhead
      packed = gpu_paper.pack_seeds(runs, 3, self._seconds(LINEAR))
      self.assertEqual(shape(packed), wanted)
      self.assertEqual(packed[0]["parts"], [pair, none])
      # --pack_seeds 1 (seeds never packed): the same, even where seeds
      # would come cheap
      self.assertEqual(shape(gpu_paper.pack_seeds(runs, 1,
                                                  self._seconds(FLAT))),
                       wanted)
      # a member dearer in the program than alone: apart, as listed
      steep = {1: 1000.0, 5: 50.0, 15: 10.0, 30: 5.0}
      self.assertEqual(gpu_paper.pack_seeds(runs, 3, self._seconds(steep)),
                       runs)
    # and never longer than one device call
    self.assertEqual(gpu_paper.pack_seeds(runs, 1, self._seconds(LINEAR)),
                     runs)

  def test_packed_run_config(self):
    spec = dict(fig=9, seed=0, kind="sweep", fairseq=False, both=True,
                contrast=True, seeds=3)
    name, extra = gpu_paper.run_spec(**spec)
    self.assertEqual(name, "fig9_both_c_seeds3")
    c = gpu_paper.fig_config(Flags, 9, "scan_bf16_pallas", **extra)
    schema.validate(c, num_devices=1)
    members = sweep.members(c)
    self.assertLen(members, gpu_paper.run_members(9, "sweep", True, 2, 3))
    self.assertLen(members, 33)
    none = [m for m in members if m["kappa1"] == 0 and m["kappa2"] == 0]
    self.assertEqual(sorted(m["seed"] for m in none), [0, 1, 2])
    self.assertEqual({(m["seed"], m["penalty_added_to"]) for m in members
                      if m not in none},
                     {(s, r) for s in range(3)
                      for r in ("mean_loss", "summed_loss")})
    self.assertEqual((c.model.num_layers, c.model.d_model), (3, 32))
    with self.assertRaisesRegex(ValueError, "seeds=3 trains seeds 0..2"):
      gpu_paper.run_spec(9, 1, "sweep", False, seeds=3)

  def test_todo_trains_the_packed_run_or_else_its_parts(self):
    with tempfile.TemporaryDirectory() as tmp:
      flags = _todo_flags(tmp)
      gpu_paper.save_curve(flags, "scan_bf16_pallas", "L=1,d=32", FLAT)
      todo = [_todo("9", "summed_loss"), _todo("9", "summed_loss",
                                               kind="none"),
              _todo("9", "mean_loss")]
      fields = ("fig", "kind", "both", "seeds", "contrast")
      packed = gpu_paper.run_seconds(9, "sweep", 50_000, 1, True, 2, 3, FLAT)
      pair = gpu_paper.run_seconds(9, "sweep", 50_000, 1, False, 2, 1, FLAT)
      margin = gpu_paper.TODO_MARGIN_S
      for left_s, expected in (
          (packed + margin + 1, [(9, "sweep", True, 3, True)]),
          (packed + margin - 1, [(9, "sweep", True, 1, False),  # the pair,
                                 (9, "none", False, 1, False)]),  # its none
          (pair + margin - 1, [(9, "sweep", False, 1, False),   # each
                               (9, "sweep", False, 1, False),   # reading
                               (9, "none", False, 1, False)])):
        self.assertEqual(_trained(flags, todo, fields, left_s), expected,
                         left_s)
      # no curve measured: the model, which packs nothing
      flags.workdir = os.path.join(tmp, "elsewhere")
      self.assertEqual(_trained(flags, todo, fields),
                       [(9, "sweep", True, 1, False),
                        (9, "none", False, 1, False)])


if __name__ == "__main__":
  absltest.main()
