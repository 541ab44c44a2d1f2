"""Tests for qkspec.experiments.outputs: config checks, the heartbeat."""
import logging
import threading

from absl.testing import absltest
from absl.testing import parameterized

from qkspec.experiments import entropy_bound
from qkspec.experiments import entropy_check
from qkspec.experiments import for_flax_example
from qkspec.experiments import outputs
from qkspec.experiments import rank_collapse
from qkspec.experiments import simulate_grid
from qkspec.experiments import simulate_rho
from qkspec.experiments import spectrum_collapse
from qkspec.experiments import theory_rho
import testutil


EXPERIMENTS = {m.__name__.rsplit(".", 1)[-1]: m for m in (
    theory_rho, entropy_bound, simulate_rho, simulate_grid, rank_collapse,
    spectrum_collapse, entropy_check, for_flax_example)}


class HeartbeatTest(absltest.TestCase):

  def test_logs_while_the_block_runs_and_stops_after(self):
    threads = set(threading.enumerate())
    three_beats = threading.Event()

    class Beats(logging.Handler):   # sets the event at the third beat

      count = 0

      def emit(self, record):
        if "work: still running" in record.getMessage():
          Beats.count += 1
          if Beats.count >= 3:
            three_beats.set()

    with self.assertLogs("absl", level="INFO") as logs:
      logging.getLogger("absl").addHandler(Beats())  # assertLogs' handlers
      with outputs.heartbeat("work", every_s=0.01):
        self.assertTrue(three_beats.wait(timeout=60.0),
                        "no three heartbeats")     # waits for the event
      # the beating thread has ended with the block: no beat can follow
      self.assertEqual(set(threading.enumerate()), threads)
      outputs.logging.info("done")
    beats = [m for m in logs.output if "work: still running" in m]
    self.assertGreaterEqual(len(beats), 3)
    done = [i for i, m in enumerate(logs.output) if "work: done in" in m]
    self.assertLen(done, 1)
    self.assertEqual(logs.output[done[0] + 1:], ["INFO:absl:done"])

  def test_quiet_for_short_work(self):
    with self.assertLogs("absl", level="INFO") as logs:
      with outputs.heartbeat("quick", every_s=30.0):
        pass
      outputs.logging.info("done")
    self.assertEqual([m for m in logs.output if "quick: still" in m], [])


class ConfigTest(parameterized.TestCase):
  """Each experiment's config checks (`outputs.require*`) name the bad field
  before anything is written."""

  @parameterized.named_parameters(
      ("negative_eigen_std", "simulate_rho", "pairs", ((0.0, -1.0),)),
      ("negative_temperature", "simulate_rho", "temperature", -1.0),
      ("bad_std_range", "simulate_grid", "eigen_std_range", (0.0, 1.0)),
      ("no_eigen_stds", "simulate_grid", "num_eigen_stds", 0),
      ("negative_stds", "spectrum_collapse", "eigen_stds", (-0.1,)),
      ("zero_temperature", "spectrum_collapse", "temperature", 0.0),
      ("bad_pairs", "entropy_check", "pairs", ((0.0, -1.0),)),
      ("negative_rc_temperature", "rank_collapse", "temperature", -2.0),
      ("zero_rc_temperature", "rank_collapse", "temperature", 0.0),
      ("no_sequences", "simulate_rho", "num_sequences", 0),
      ("short_sequence", "simulate_rho", "seq_len", 1),
      ("no_draws", "simulate_rho", "num_draws", 0),
      ("regimes_mismatch", "simulate_rho", "regimes", ("a",)),
      ("unknown_covariance", "simulate_rho", "covariances", ("diag",)),
      ("negative_eta", "theory_rho", "eta_values", (-0.1, 1.0)),
      ("one_theta", "theory_rho", "num_theta", 1),
      ("bad_variant", "theory_rho", "variants", ("printed",)),
      ("short_rows", "entropy_bound", "seq_lens", (1, 16)),
      ("negative_nu_max", "entropy_bound", "nu_max", -1.0),
      ("heads_not_dividing_d", "for_flax_example", "num_heads", 3),
  )
  def test_bad_config_raises_naming_the_field(self, name, field, value):
    config = testutil.get_config(name, "smoke")
    config[field] = value
    workdir = testutil.workdir(self)
    with self.assertRaisesRegex(ValueError, f"config.{field}"):
      EXPERIMENTS[name].run(config, workdir)
    self.assertFalse(workdir.exists(), "failed before writing anything")

  def test_unknown_config_arg_raises(self):
    with self.assertRaisesRegex(ValueError, "smoke"):
      testutil.get_config("simulate_rho", "smok")

  @parameterized.parameters(*EXPERIMENTS)
  def test_config_names_its_experiment_and_validates(self, name):
    for arg in (None, "smoke"):
      config = testutil.get_config(name, arg)
      self.assertEqual(config.experiment, name)
      EXPERIMENTS[name].validate(config)
      if "temperature" in config:
        self.assertIsNone(config.temperature, f"{name}: default lambda")


class RequireTest(absltest.TestCase):

  def test_require_ints(self):
    config = testutil.get_config("simulate_rho", "smoke")
    outputs.require_ints(config, {"dim": 1, "seq_len": 2})
    config.seq_len = 1
    with self.assertRaisesRegex(ValueError, "config.seq_len must be an "
                                "integer >= 2"):
      outputs.require_ints(config, {"dim": 1, "seq_len": 2})


if __name__ == "__main__":
  absltest.main()
