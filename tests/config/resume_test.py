"""Resuming a workdir under a changed config (qkspec.config.resume)."""
import json
import os
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

from qkspec.config import defaults
from qkspec.config import resume
from qkspec.config import schema
from qkspec.training import loop
import testutil


def _as_saved(config) -> dict:
  """`config` as its config.json reads back."""
  return json.loads(config.to_json())


def _changed(**fields):
  """theory_config() with dotted `fields` (x__y for x.y) set."""
  c = defaults.theory_config()
  for key, value in fields.items():
    *parents, name = key.split("__")
    section = c
    for p in parents:
      section = section[p]
    section[name] = value
  return c


class ChangedFieldsTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("width", dict(model__d_model=32), "model.d_model", (16, 32)),
      ("vocabulary", dict(task="synthetic"), "task", ("theory", "synthetic")),
      ("data_seed", dict(data__seed=1), "data.seed", (0, 1)),
      ("batch", dict(data__batch_size=32), "data.batch_size", (64, 32)),
      ("seed", dict(seed=3), "seed", (0, 3)),
      ("members", dict(sweep__kappa2=(0.0, 1.0)), "sweep.kappa2",
       ([], [0.0, 1.0])),
      ("reading", dict(locater__penalty_added_to="summed_loss"),
       "locater.penalty_added_to", ("mean_loss", "summed_loss")),
      ("learning_rate", dict(opt__lr=1.0), "opt.lr", (2.5e-5, 1.0)))
  def test_an_unsafe_change_is_named_with_both_values(self, fields, key,
                                                       values):
    old = _as_saved(defaults.theory_config())
    self.assertEqual(resume.changed_fields(old, _as_saved(_changed(**fields))),
                     {key: values})

  def test_safe_changes_pass(self):
    old = _as_saved(defaults.theory_config())
    new = _as_saved(_changed(num_steps=7, log_every=1, eval_every=3,
                             checkpoint_every=5, max_to_keep=9,
                             progress_every_s=0.0, precompile=False,
                             steps_per_call=4, sweep__member_batch=1,
                             sweep__shard_members=False))
    self.assertEqual(resume.changed_fields(old, new), {})

  def test_a_field_one_config_lacks_is_absent(self):
    old = _as_saved(defaults.theory_config())
    new = _as_saved(defaults.theory_config())
    new["sweep"]["extra"] = True
    new["num_steps_extra"] = 1
    new["data"]["data_dir"] = "/data"      # a SAFE field, absent before
    del old["model"]["ffn_dim"]
    changes = resume.changed_fields(old, new)
    self.assertEqual(sorted(changes), ["model.ffn_dim", "num_steps_extra",
                                       "sweep.extra"])
    self.assertEqual(
        resume.describe({"model.ffn_dim": changes["model.ffn_dim"]}),
        "model.ffn_dim <absent> -> 16")

  def test_every_safe_field_is_a_config_field(self):
    known = (schema.flatten(defaults.theory_config())
             | schema.flatten(defaults.lm_config()))
    self.assertEmpty(set(resume.SAFE) - set(known))


class ResumeRefusalTest(absltest.TestCase):
  """A theory smoke run of 2 steps, resumed under changed configs."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.tmp = tempfile.mkdtemp()
    cls.workdir = os.path.join(cls.tmp, "run")
    loop.train_and_evaluate(cls._config(num_steps=2), cls.workdir)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls.tmp)
    super().tearDownClass()

  @staticmethod
  def _config(**fields):
    c = testutil.get_config("theory_task", "smoke")
    c.update(fields)
    return c

  def _files(self):
    """{path: bytes} of every file in the workdir."""
    out = {}
    for root, _, names in os.walk(self.workdir):
      for name in names:
        with open(os.path.join(root, name), "rb") as f:
          out[os.path.join(root, name)] = f.read()
    return out

  def test_a_changed_width_is_refused_and_nothing_is_written(self):
    before = self._files()
    wider = self._config(num_steps=4)
    wider.model.d_model = 16
    with self.assertRaisesRegex(
        ValueError, r"another config \(model.d_model 8 -> 16\); use a fresh "
        r"--workdir"):
      loop.train_and_evaluate(wider, self.workdir)
    self.assertEqual(self._files(), before)

  def test_more_steps_resume(self):
    workdir = os.path.join(self.tmp, "more_steps")
    shutil.copytree(self.workdir, workdir)
    state = loop.train_and_evaluate(self._config(num_steps=4, log_every=1),
                                    workdir)
    self.assertEqual(int(state.step[0]), 4)

  def test_checkpoints_of_other_strengths_are_refused_without_config(self):
    workdir = os.path.join(self.tmp, "no_config")
    shutil.copytree(self.workdir, workdir)
    os.remove(os.path.join(workdir, "config.json"))    # nothing to compare
    other = self._config(num_steps=4)
    other.sweep.kappa2 = (0.0, 2.0, 100.0)
    with self.assertRaisesRegex(
        ValueError, r"holds a run with other kappa2 values \(\[  0\.   1\. "
        r"100\.\]\); use a fresh --workdir"):
      loop.train_and_evaluate(other, workdir)


if __name__ == "__main__":
  absltest.main()
