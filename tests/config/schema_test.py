"""Tests for qkspec.config.schema: what validate refuses, and its constants."""
from absl.testing import absltest
from absl.testing import parameterized
import ml_collections

from configs import depth_width
from configs import locater_wt2
from configs import theory_task
from qkspec.config import ConfigError
from qkspec.config import defaults
from qkspec.config import schema
from qkspec.theory import locater
import training_fixtures


class ConfigCheckTest(parameterized.TestCase):

  def _check(self, config, pattern):
    with self.assertRaisesRegex(ConfigError, pattern):
      schema.validate(config)

  def test_shipped_configs_are_valid(self):
    for c in (theory_task.get_config(), theory_task.get_config("smoke"),
              locater_wt2.get_config(), locater_wt2.get_config("smoke"),
              depth_width.get_config("L=6,d=32"),
              depth_width.get_config("L=3,d=128,smoke"),
              locater_wt2.get_config("fairseq"),
              depth_width.get_config("L=3,d=32,fairseq")):
      schema.validate(c)
    self.assertEqual(depth_width.get_config("L=1,d=32").opt.lr, 1e-4)
    self.assertLen(locater_wt2.get_sweep(), 5)
    with self.assertRaisesRegex(ValueError, "unknown config argument 'X'"):
      depth_width.get_config("X=3")

  def test_an_experiment_config_is_sent_to_launch_run(self):
    self._check(ml_collections.ConfigDict({"experiment": "simulate_rho",
                                           "aniso_half_width": 2.5}),
                r"^an experiment config \(config.experiment='simulate_rho'\)"
                r": run it with python launch/run.py")

  def test_smoke_keeps_a_named_data_set_or_says_why_not(self):
    c = locater_wt2.get_config("smoke")
    self.assertEqual(c.data.name, "synthetic")
    for key in ("manual_dir", "data_dir"):
      named = ml_collections.ConfigDict(c.to_dict())
      named.data[key] = "/data/wikitext-2"
      self._check(named, rf"config.data.{key}='/data/wikitext-2' names a "
                  r"data set, but the config trains on a synthetic stream "
                  r".*add --config.data.name=wikitext2")
      named.data.name = "wikitext2"        # a small run on the real data
      schema.validate(named)
    named.data.name = "wikitext"
    self._check(named, r"data.name must be one of \('wikitext2', "
                r"'synthetic'\)")

  def test_unknown_key(self):
    c = ml_collections.ConfigDict(training_fixtures.single_theory().to_dict())
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
    c = training_fixtures.single_theory()
    section, _, name = key.rpartition(".")
    (c[section] if section else c)[name] = value
    self._check(c, pattern)

  def test_shard_members_is_true_false_or_auto(self):
    c = training_fixtures.single_theory()
    self.assertIsNone(c.sweep.shard_members)          # auto
    for value in (True, False, None):
      c.sweep.shard_members = value
      schema.validate(c)
    c = ml_collections.ConfigDict(c.to_dict())       # untyped, as from JSON
    c.sweep.shard_members = 1
    self._check(c, r"sweep.shard_members must be True, False or None")

  def test_temperature_is_none_or_positive(self):
    c = training_fixtures.single_theory()
    self.assertIsNone(c.model.temperature)            # sqrt(head width)
    schema.validate(c)
    c.model.temperature = 2.0
    schema.validate(c)
    for value in (0.0, -1.0):
      c.model.temperature = value
      with self.assertRaisesRegex(ValueError, "temperature must be > 0"):
        schema.validate(c)

  def test_batch_not_divisible_by_devices(self):
    schema.check_batch_split(training_fixtures.single_theory(), 2)
    with self.assertRaisesRegex(ConfigError,
                                r"data.batch_size=8 .* 3 devices"):
      schema.check_batch_split(training_fixtures.single_theory(), 3)

  def test_zip_sweep_lengths(self):
    c = training_fixtures.single_theory()
    c.sweep.kappa1, c.sweep.kappa2 = (1.0, 2.0), (1.0, 2.0, 3.0)
    self._check(c, "equal lengths")


class LocaterFieldsTest(absltest.TestCase):

  def test_config_fields_are_the_locater_hparams(self):
    fields = locater.LocaterHParams._fields
    self.assertEqual(schema.SWEEPABLE,
                     ("seed",) + fields + ("penalty_added_to",))
    for c in (defaults.theory_config(), defaults.lm_config()):
      self.assertEqual({k: c.locater[k] for k in fields},
                       locater.LocaterHParams()._asdict())
      # The one other locater field is the reading of kappa, applied in
      # qkspec.training.step (not a LocaterHParams field; swept as a
      # per-member factor, tests/system/both_readings_test.py).
      self.assertEqual(set(c.locater) - set(fields), {"penalty_added_to"})
      self.assertContainsSubset(schema.SWEEPABLE, set(c.sweep))


class StepsPerCallTest(absltest.TestCase):

  def test_zero_is_refused(self):
    c = training_fixtures.lm_smoke()
    c.steps_per_call = 0
    with self.assertRaisesRegex(ValueError, "steps_per_call"):
      schema.validate(c)


if __name__ == "__main__":
  absltest.main()
