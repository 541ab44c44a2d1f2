"""qkspec.training.loop: end-to-end smoke runs, NaN stop, config checks."""
import json
import os
import pathlib
import tempfile
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import chex
import ml_collections
import numpy as np
import optax

from qkspec.config import defaults as common
from configs import depth_width
from configs import locater_wt2
from configs import theory_task
from qkspec.training import checkpoint
from qkspec.config import schema
from qkspec.training import metric_writer
from qkspec.experiments import training_plots
from qkspec.training import loop
from qkspec.training import model as model_lib
from qkspec.training import step as step_lib

_REPO = pathlib.Path(__file__).resolve().parents[1]

_FIXTURE = _REPO / "tests" / "testdata" / "wikitext2_tiny"


def _single_theory(**kw):
  """theory_task smoke without the sweep (one run)."""
  c = theory_task.get_config("smoke")
  c.sweep.kappa1, c.sweep.kappa2, c.sweep.target = (), (), ()
  c.locater.kappa1, c.locater.kappa2 = 1.0, 1.0
  c.update(kw)
  return c


class EndToEndTest(absltest.TestCase):

  def test_theory_smoke_sweep_writes_metrics_and_plots(self):
    with tempfile.TemporaryDirectory() as tmp:
      loop.train_and_evaluate(theory_task.get_config("smoke"), tmp)
      members = json.load(open(os.path.join(tmp, "members.json")))
      self.assertLen(members, 3)
      self.assertEqual(checkpoint.Checkpointer(tmp).latest_step(), 4)
      m = metric_writer.read_metrics(os.path.join(tmp, members[2]["dir"]))
      steps, rho = m["l0/rho"]
      np.testing.assert_array_equal(steps, [0, 2, 4])
      self.assertEqual(rho.shape, (3, 8))            # [log steps, T]
      self.assertTrue(np.all((rho >= 0) & (rho <= 1)))
      for key in ("train/loss", "l0/qk_scale", "l0/qk_trace",
                  "l0/eigen_variance", "l0/entropy", "l0/rank_residual",
                  "valid/loss", "steps_per_sec"):
        self.assertIn(key, m)
        self.assertTrue(np.all(np.isfinite(m[key][1])), key)
      # Non-causal theory model: entropy <= log T.
      self.assertLessEqual(m["l0/entropy"][1].max(), np.log(8) + 1e-6)
      hp = json.load(open(os.path.join(tmp, members[2]["dir"],
                                       "hparams.json")))
      self.assertEqual(hp["target"], 12.0)
      for path in training_plots.plot_workdir(tmp):
        self.assertGreater(os.path.getsize(path), 1000)

  def test_lm_on_the_wikitext2_fixture(self):
    c = common.lm_config()
    c.model.update(d_model=8, ffn_dim=8)
    c.data.seq_len, c.data.batch_size = 4, 2
    c.data.manual_dir = str(_FIXTURE)
    c.data.verify_checksums = False
    c.num_steps, c.log_every, c.eval_every, c.checkpoint_every = 3, 1, 3, 3
    c.opt.lr = 1e-2
    with tempfile.TemporaryDirectory() as tmp:
      c.data.data_dir = os.path.join(tmp, "tfds")
      loop.train_and_evaluate(c, os.path.join(tmp, "run"))
      m = metric_writer.read_metrics(os.path.join(tmp, "run"))
    self.assertEqual(m["l0/rho"][1].shape, (4, 4))
    for split in ("valid", "test"):
      loss, ppl = m[f"{split}/loss"][1][-1], m[f"{split}/ppl"][1][-1]
      self.assertTrue(np.isfinite(loss))
      np.testing.assert_allclose(ppl, np.exp(loss), rtol=1e-6)
    np.testing.assert_allclose(m["train/ppl"][1], np.exp(m["train/loss"][1]),
                               rtol=1e-5)
    # Causal LM: entropy of query t is at most log(t + 1).
    self.assertLessEqual(m["l0/entropy"][1].max(),
                         np.mean(np.log(np.arange(1, 5))) + 1e-5)


class MeasurementTest(absltest.TestCase):

  def test_logged_eta_and_r_use_the_head_temperature(self):
    # H = 2 heads of width D = d / 2: lambda = sqrt(D), not sqrt(d). The
    # logged xi, eta and r of each head equal Lemma 1's statistics of the
    # final W_QK with that lambda.
    c = _single_theory(num_steps=2, log_every=2, eval_every=2,
                       checkpoint_every=2)
    c.model.num_heads, c.model.out_proj = 2, True
    d = c.model.d_model
    with tempfile.TemporaryDirectory() as tmp:
      state = loop.train_and_evaluate(c, tmp)
      m = metric_writer.read_metrics(tmp)
    w = np.asarray(model_lib.qk_matrices(state.params), np.float64)[0]
    sym = (w + np.swapaxes(w, -1, -2)) / 2
    trace = np.trace(sym, axis1=-2, axis2=-1)
    root = np.sqrt(np.einsum("hij,hji->h", sym, sym))
    lam = np.sqrt(d / 2)
    for h in range(2):
      np.testing.assert_array_equal(m[f"l0/h{h}/eta"][0], [0, 2])
      got = {k: m[f"l0/h{h}/{k}"][1][-1] for k in ("xi", "eta", "r")}
      np.testing.assert_allclose(got["xi"], trace[h] / root[h], rtol=1e-4)
      np.testing.assert_allclose(got["eta"], root[h] / lam, rtol=1e-4)
      np.testing.assert_allclose(got["r"], trace[h] / lam, rtol=1e-4,
                                 atol=1e-6)
      self.assertGreater(abs(got["eta"] - root[h] / np.sqrt(d)), 1e-3)


class NaNTest(absltest.TestCase):

  def test_a_gradient_not_finite_is_flagged_with_a_finite_loss(self):
    # "c" is large enough to be summed by itself, "a" and "b" flat.
    big = step_lib.FLAT_NORM_MAX
    grads = {"a": np.ones((3, 4), np.float32), "b": np.full(5, 2.0,
                                                            np.float32),
             "c": np.full((2, big // 2), 0.5, np.float32)}
    finite, norm = step_lib.update_checks(np.float32(1.0), grads)
    self.assertTrue(finite)
    np.testing.assert_allclose(norm, np.sqrt(12 + 20 + big / 4), rtol=1e-6)
    np.testing.assert_allclose(norm, optax.tree.norm(grads), rtol=1e-6)
    for leaf in ("b", "c"):
      for bad in (np.nan, np.inf, -np.inf, 1e20):   # 1e20: norm overflows
        g = grads[leaf].copy()
        g.reshape(-1)[3] = bad
        self.assertFalse(step_lib.update_checks(
            np.float32(1.0), {**grads, leaf: g})[0], (leaf, bad))
    self.assertFalse(step_lib.update_checks(np.float32(np.nan), grads)[0])

  def test_nonfinite_loss_stops_with_the_step_and_keeps_last_checkpoint(self):
    # lr = 1e30: the update at step 0 is finite but blows the weights up, so
    # the loss at step 1 overflows.
    c = _single_theory(num_steps=6, log_every=3, checkpoint_every=1,
                       eval_every=100)
    c.opt.lr = 1e30
    with tempfile.TemporaryDirectory() as tmp:
      with self.assertRaisesRegex(FloatingPointError, r"at step 1\b") as cm:
        loop.train_and_evaluate(c, tmp)
      self.assertEqual(checkpoint.Checkpointer(tmp).all_steps(), [1])
    self.assertIn("the newest checkpoint is step 1 (", str(cm.exception))

  def test_nonfinite_before_any_checkpoint_says_there_is_none(self):
    c = _single_theory(num_steps=6, log_every=3, checkpoint_every=100,
                       eval_every=100)
    c.opt.lr = 1e30
    with tempfile.TemporaryDirectory() as tmp:
      with self.assertRaisesRegex(FloatingPointError,
                                  "no checkpoint was written yet"):
        loop.train_and_evaluate(c, tmp)


class LogOverlapTest(absltest.TestCase):

  def test_logs_and_checkpoints_are_written_while_the_next_call_computes(
      self):
    # One step per call (CPU): the k-th call trains step k. A log or
    # checkpoint at step s is written after the call of step s is
    # dispatched (their NaN checks before it: the NaN tests); the last
    # step's after no call.
    events = []
    build = step_lib.build_steps

    class Recorded:       # the jitted train step, its calls recorded
      def __init__(self, jitted):
        self.jitted = jitted

      def __call__(self, *args):
        events.append(("call", sum(e[0] == "call" for e in events)))
        return self.jitted(*args)

      def __getattr__(self, name):      # .lower for the precompilation
        return getattr(self.jitted, name)

    def recording_build(config, mesh=None):
      steps = build(config, mesh)
      return steps.replace(train=Recorded(steps.train))

    write = metric_writer.MetricWriter.write_scalars

    def recording_write(writer, step, scalars):
      if "train/loss" in scalars or step == 0:
        events.append(("log", step))
      return write(writer, step, scalars)

    save = checkpoint.Checkpointer.save

    def recording_save(ckpt, step, state, **kw):
      events.append(("save", step))
      return save(ckpt, step, state, **kw)

    c = _single_theory(num_steps=6, log_every=2, eval_every=100,
                       checkpoint_every=4)
    with mock.patch.object(step_lib, "build_steps", recording_build), \
        mock.patch.object(metric_writer.MetricWriter, "write_scalars",
                          recording_write), \
        mock.patch.object(checkpoint.Checkpointer, "save", recording_save), \
        tempfile.TemporaryDirectory() as tmp:
      state = loop.train_and_evaluate(c, tmp)
      ckpt = checkpoint.Checkpointer(tmp)
      self.assertEqual(ckpt.all_steps(), [4, 6])
      saved, _ = ckpt.restore(6, state)
    chex.assert_trees_all_equal(saved, state)
    writes = [i for i, e in enumerate(events) if e[0] != "call"]
    self.assertEqual([events[i] for i in writes],
                     [("log", 0), ("log", 2), ("log", 4), ("save", 4),
                      ("log", 6), ("save", 6)])
    for i in writes[:-2]:
      self.assertEqual(events[i - 1 - (events[i] == ("save", 4))],
                       ("call", events[i][1]), events)
    self.assertEqual(writes[-2:], [len(events) - 2, len(events) - 1])


class ConfigCheckTest(parameterized.TestCase):

  def _check(self, config, pattern, num_devices=None):
    with self.assertRaisesRegex(ValueError, pattern):
      schema.validate(config, num_devices)

  def test_shipped_configs_are_valid(self):
    for c in (theory_task.get_config(), theory_task.get_config("smoke"),
              locater_wt2.get_config(), locater_wt2.get_config("smoke"),
              depth_width.get_config("L=6,d=32"),
              depth_width.get_config("L=3,d=128,smoke"),
              locater_wt2.get_config("fairseq"),
              depth_width.get_config("L=3,d=32,fairseq")):
      schema.validate(c, num_devices=1)
    self.assertEqual(depth_width.get_config("L=1,d=32").opt.lr, 1e-4)
    self.assertLen(locater_wt2.get_sweep(), 5)
    with self.assertRaisesRegex(ValueError, "unknown config argument 'X'"):
      depth_width.get_config("X=3")

  def test_unknown_key(self):
    c = ml_collections.ConfigDict(_single_theory().to_dict())
    c.locater.kapa2 = 1.0
    self._check(c, r"'locater.kapa2'")

  @parameterized.parameters(
      ("locater.kappa1", -1.0, r"locater.kappa1 must be >= 0"),
      ("locater.kappa2", -0.5, r"locater.kappa2 must be >= 0"),
      ("model.num_heads", 3, r"model.num_heads=3 does not divide"),
      ("opt.lr", 0.0, r"opt.lr must be > 0"),
      ("model.norm", "mid", r"model.norm must be one of"),
      ("sweep.kappa2", (1.0, -1.0), r"sweep.kappa2 entries must be >= 0"),
      ("data.seq_len", 1, r"data.seq_len must be an integer >= 2"),
      ("sweep.member_batch", -2, r"sweep.member_batch must be an integer"),
      ("model.temperature", -1.0, r"model.temperature must be > 0"),
      ("num_steps", 0, r"config.num_steps must be an integer >= 1, got 0"),
      ("progress_every_s", -1.0, r"progress_every_s must be >= 0"),
      ("locater.penalty_added_to", "fairseq",
       r"locater.penalty_added_to must be one of \('mean_loss', "
       r"'summed_loss'\)"),
  )
  def test_impossible_values(self, key, value, pattern):
    c = _single_theory()
    section, _, name = key.rpartition(".")
    (c[section] if section else c)[name] = value
    self._check(c, pattern)

  def test_shard_members_is_true_false_or_auto(self):
    c = _single_theory()
    self.assertIsNone(c.sweep.shard_members)          # auto
    for value in (True, False, None):
      c.sweep.shard_members = value
      schema.validate(c)
    c = ml_collections.ConfigDict(c.to_dict())       # untyped, as from JSON
    c.sweep.shard_members = 1
    self._check(c, r"sweep.shard_members must be True, False or None")

  def test_temperature_is_none_or_positive(self):
    c = _single_theory()
    self.assertIsNone(c.model.temperature)            # sqrt(head width)
    schema.validate(c)
    c.model.temperature = 2.0
    schema.validate(c)
    for value in (0.0, -1.0):
      c.model.temperature = value
      with self.assertRaisesRegex(ValueError, "temperature must be > 0"):
        schema.validate(c)

  def test_batch_not_divisible_by_devices(self):
    self._check(_single_theory(), r"data.batch_size=8 .* 3 devices",
                num_devices=3)

  def test_zip_sweep_lengths(self):
    c = _single_theory()
    c.sweep.kappa1, c.sweep.kappa2 = (1.0, 2.0), (1.0, 2.0, 3.0)
    self._check(c, "equal lengths")

  def test_seq_len_longer_than_the_data_fails_before_training(self):
    c = locater_wt2.get_config("smoke")
    c.data.train_tokens = 40           # < seq_len x batch = 64
    with tempfile.TemporaryDirectory() as tmp:
      with self.assertRaisesRegex(ValueError, r"data.seq_len=8"):
        loop.train_and_evaluate(c, tmp)
      self.assertFalse(os.path.exists(os.path.join(tmp, "ckpt")))


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
      # (event file names hold the second, then a per-process counter: a
      # second writer within the same second still sorts after the first)
      # A run resumed from step 1 drops TensorBoard's steps >= 2.
      with metric_writer.MetricWriter(tmp, purge_step=2) as w:
        w.write_scalars(2, {"train/loss": 20.0})
      acc = event_accumulator.EventAccumulator(tmp)
      acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    self.assertEqual(got, [(1, 1.0), (2, 20.0)])


if __name__ == "__main__":
  absltest.main()
