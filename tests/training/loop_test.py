"""qkspec.training.loop end to end: smoke runs, NaN stop, a run refused
before training, resuming."""
import dataclasses
import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
import chex
import jax
import numpy as np

from configs import locater_wt2
from configs import theory_task
from qkspec.config import defaults as common
from qkspec.config import schema
from qkspec.experiments import runner
from qkspec.plots import training_figures
from qkspec.theory import locater
from qkspec.training import checkpoint
from qkspec.training import loop
from qkspec.training import metric_writer
from qkspec.training import step as step_lib
from qkspec.training import sweep
from qkspec.training import tasks
import testutil
import training_fixtures
import wikitext2_fixtures


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
      for path in training_figures.plot_workdir(tmp):
        self.assertGreater(os.path.getsize(path), 1000)

  def test_lm_on_the_wikitext2_fixture(self):
    c = common.lm_config()
    c.model.update(d_model=8, ffn_dim=8)
    c.data.seq_len, c.data.batch_size = 4, 2
    c.data.manual_dir = str(wikitext2_fixtures.WIKITEXT2_TINY)
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


class NaNTest(absltest.TestCase):

  def test_nonfinite_loss_stops_with_the_step_and_keeps_last_checkpoint(self):
    # lr = 1e30: the update at step 0 is finite but blows the weights up, so
    # the loss at step 1 overflows.
    c = training_fixtures.single_theory(num_steps=6, log_every=3,
                                        checkpoint_every=1, eval_every=100)
    c.opt.lr = 1e30
    with tempfile.TemporaryDirectory() as tmp:
      with self.assertRaisesRegex(FloatingPointError, r"at step 1\b") as cm:
        loop.train_and_evaluate(c, tmp)
      self.assertEqual(checkpoint.Checkpointer(tmp).all_steps(), [1])
    self.assertIn("the newest checkpoint is step 1 (", str(cm.exception))

  def test_nonfinite_before_any_checkpoint_says_there_is_none(self):
    c = training_fixtures.single_theory(num_steps=6, log_every=3,
                                        checkpoint_every=100, eval_every=100)
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

    def recording_build(plan):
      steps = build(plan)
      return dataclasses.replace(steps, train=Recorded(steps.train))

    write = metric_writer.MetricWriter.write_scalars

    def recording_write(writer, step, scalars):
      if "train/loss" in scalars or step == 0:
        events.append(("log", step))
      return write(writer, step, scalars)

    save = checkpoint.Checkpointer.save

    def recording_save(ckpt, step, state, **kw):
      events.append(("save", step))
      return save(ckpt, step, state, **kw)

    c = training_fixtures.single_theory(num_steps=6, log_every=2,
                                        eval_every=100, checkpoint_every=4)
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


class ConfigCheckTest(absltest.TestCase):

  def test_seq_len_longer_than_the_data_fails_before_training(self):
    c = locater_wt2.get_config("smoke")
    c.data.train_tokens = 40           # < seq_len x batch = 64
    with tempfile.TemporaryDirectory() as tmp:
      with self.assertRaisesRegex(ValueError, r"data.seq_len=8"):
        loop.train_and_evaluate(c, tmp)
      self.assertFalse(os.path.exists(os.path.join(tmp, "ckpt")))

  def test_a_launch_validates_its_config_before_processes_start_and_once_more(
      self):
    # What launch/run.py does with a training config once its flags are
    # parsed (cli.main): its check, before any process joins, then
    # training (the loop validates what a library caller hands it) and
    # plotting; schema.validate runs nowhere else.
    c = theory_task.get_config("smoke")
    c.num_steps, c.precompile = 1, False
    workdir = str(testutil.workdir(self))
    with mock.patch.object(schema, "validate",
                           wraps=schema.validate) as validate:
      runner.check(c)
      runner.run(c, workdir)
    self.assertEqual(validate.call_count, 2)
    self.assertTrue(os.path.exists(os.path.join(workdir, "ckpt")))


# Reruns of the same steps (straight vs resumed) hit the compilation cache.
class ResumeTest(absltest.TestCase):

  def test_resumed_sweep_is_bit_identical_to_uninterrupted(self):
    # An LM sweep (two members, dropout 0.1): 2N steps straight vs N, stop,
    # restart in the same workdir, continue to 2N.
    cfg = testutil.get_config("rho_training", "smoke")
    cfg.num_steps = 4
    cfg.checkpoint_every = 2
    cfg.eval_every = 4
    with tempfile.TemporaryDirectory() as tmp:
      straight = loop.train_and_evaluate(cfg, os.path.join(tmp, "a"))
      half = testutil.get_config("rho_training", "smoke")
      half.num_steps = 2
      half.checkpoint_every = 2
      half.eval_every = 4
      wd = os.path.join(tmp, "b")
      loop.train_and_evaluate(half, wd)
      self.assertEqual(checkpoint.Checkpointer(wd).all_steps(), [2])
      resumed = loop.train_and_evaluate(cfg, wd)
      self.assertEqual(checkpoint.Checkpointer(wd).latest_step(), 4)
      m = metric_writer.read_metrics(os.path.join(wd, "kappa1=100,kappa2=1"))
      np.testing.assert_array_equal(m["train/loss"][0], [2, 4])
    self.assertEqual(int(resumed.step[0]), 4)
    testutil.assert_trees_equal(resumed.params, straight.params)
    testutil.assert_trees_equal(resumed.opt_state, straight.opt_state)

  @testutil.slow("a run trained and its checkpoint rewritten in the older "
                 "layout")
  def test_resumes_a_checkpoint_with_the_old_dict_hparams(self):
    # Checkpoints written before TrainState.hparams became a LocaterHParams
    # held a {"kappa1", "kappa2", "target"} dict. Rewrite a checkpoint in
    # that layout, resume from it: bit-identical to an uninterrupted run.
    cfg = testutil.get_config("theory_task", "smoke")      # 3-member sweep
    half = testutil.get_config("theory_task", "smoke")
    half.num_steps = 2
    with tempfile.TemporaryDirectory() as tmp:
      straight = loop.train_and_evaluate(cfg, os.path.join(tmp, "a"))
      wd = os.path.join(tmp, "b")
      loop.train_and_evaluate(half, wd)
      plan = sweep.make_plan(half)
      steps = step_lib.build_steps(plan)
      init_keys, _, hparams = step_lib.member_inputs(plan)
      abstract = checkpoint.abstract_like(
          jax.eval_shape(steps.init, init_keys, hparams), steps.replicated)
      ckpt = checkpoint.Checkpointer(wd)
      state, _ = ckpt.restore(2, abstract)
      ckpt.close()
      old = state.replace(hparams=dict(state.hparams._asdict()))
      self.assertEqual(sorted(old.hparams), ["kappa1", "kappa2", "target"])
      shutil.rmtree(os.path.join(wd, "ckpt"))
      ckpt = checkpoint.Checkpointer(wd)
      ckpt.save(2, old)
      ckpt.close()
      resumed = loop.train_and_evaluate(cfg, wd)
    self.assertIsInstance(resumed.hparams, locater.LocaterHParams)
    np.testing.assert_array_equal(resumed.hparams.target, [1.0, 1.0, 12.0])
    self.assertEqual(int(resumed.step[0]), 4)
    testutil.assert_trees_equal(resumed.params, straight.params)
    testutil.assert_trees_equal(resumed.opt_state, straight.opt_state)

  def test_keyboard_interrupt_saves_a_checkpoint(self):
    cfg = testutil.get_config("theory_task", "smoke")
    cfg.num_steps = 8
    cfg.checkpoint_every = 100
    real = tasks.make_task

    def interrupting(config, sharding):
      task = real(config, sharding)
      def batch(step):
        if step == 3:
          raise KeyboardInterrupt
        return task.train_batch(step)
      return tasks.Task(**{**task.__dict__, "train_batch": batch})

    with tempfile.TemporaryDirectory() as tmp:
      with mock.patch.object(tasks, "make_task", interrupting):
        with self.assertRaises(KeyboardInterrupt):
          loop.train_and_evaluate(cfg, tmp)
      self.assertEqual(checkpoint.Checkpointer(tmp).all_steps(), [3])
      resumed = loop.train_and_evaluate(cfg, tmp)        # resumes at 3
      self.assertEqual(int(resumed.step[0]), 8)


if __name__ == "__main__":
  absltest.main()
