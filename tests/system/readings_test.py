"""Tests for the two readings of kappa (config.locater.penalty_added_to).

"mean_loss" (default): mean loss + kappa * penalty. "summed_loss" (fairseq):
the same gradients as "mean_loss" with kappa / (target tokens per batch).
"""
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from configs import depth_width
from configs import locater_wt2
from configs import rho_training
from configs import theory_task
from qkspec.config import defaults
from qkspec.config import schema
from qkspec.training import step as step_lib
from qkspec.training import sweep
from qkspec.training import tasks
import testutil
import training_fixtures


KAPPA1, KAPPA2 = 100.0, 1.0


def _smoke_lm(added_to, kappa1=KAPPA1, kappa2=KAPPA2):
  """locater_wt2 smoke (B = T = 8, N = 64 targets), one run, no sweep."""
  c = locater_wt2.get_config("smoke")
  c.sweep.kappa2 = ()
  c.locater.update(kappa1=kappa1, kappa2=kappa2, target=1.0,
                   penalty_added_to=added_to)
  schema.validate(c)
  return c


def _one_step(c):
  """(params, metrics) after one train step of `c` on a fixed batch."""
  steps, state, dropout_key = training_fixtures.initialized(c)
  state, metrics = steps.train(state, training_fixtures.lm_batch(c),
                               dropout_key)
  return jax.device_get(state.params), jax.device_get(metrics)


class PenaltyScaleTest(absltest.TestCase):

  def test_default_is_the_literal_reading(self):
    for c in (defaults.lm_config(), defaults.theory_config(),
              locater_wt2.get_config(), theory_task.get_config()):
      self.assertEqual(c.locater.penalty_added_to, "mean_loss")
      self.assertEqual(step_lib.penalty_scale_of(c), 1.0)

  def test_fairseq_scale_is_one_over_target_tokens(self):
    c = locater_wt2.get_config("fairseq")
    self.assertEqual(step_lib.targets_per_batch(c), 64 * 64)
    self.assertEqual(step_lib.penalty_scale_of(c), 1.0 / 4096)
    self.assertEqual(step_lib.penalty_scale_of(_smoke_lm("summed_loss")),
                     1.0 / 64)
    # Theory task: squared loss per sequence, one target each: N = B.
    t = theory_task.get_config()
    t.locater.penalty_added_to = "summed_loss"
    schema.validate(t)
    self.assertEqual(step_lib.penalty_scale_of(t), 1.0 / t.data.batch_size)
    # Sorting / memorisation: a target per token, [B, T] of them.
    s = defaults.synthetic_config()
    s.locater.penalty_added_to = "summed_loss"
    schema.validate(s)
    batch = tasks.data_functions(s.data)[0](0)
    self.assertEqual(batch["targets"].shape,
                     (s.data.batch_size, s.data.seq_len))
    self.assertEqual(step_lib.targets_per_batch(s), batch["targets"].size)


class GradientTest(absltest.TestCase):

  @testutil.slow("both readings' gradients; step_reference_test checks both "
                 "readings' updates against NumPy")
  def test_fairseq_gradient_is_literal_with_kappa_over_tokens(self):
    fairseq = _smoke_lm("summed_loss")
    n = fairseq.data.batch_size * fairseq.data.seq_len
    literal = _smoke_lm("mean_loss", KAPPA1 / n, KAPPA2 / n)
    steps = step_lib.build_steps(sweep.make_plan(fairseq))
    params = steps.init(jax.random.key(0), sweep.hparams(
        sweep.members(fairseq)[0])).params
    batch, key = training_fixtures.lm_batch(fairseq), jax.random.key(1)

    def grads(c, **kw):
      hp = sweep.hparams(sweep.members(c)[0])

      def fn(p):
        return step_lib.objective(p, hp, batch, key, task=steps.task,
                                  deterministic=True, **kw)
      return jax.jit(jax.grad(fn, has_aux=True))(params)

    g_fairseq, (loss_f, pen_f) = grads(
        fairseq, penalty_scale=step_lib.penalty_scale_of(fairseq))
    g_literal, (loss_l, pen_l) = grads(literal)
    g_kappa, _ = grads(fairseq)           # kappa itself, mean_loss
    np.testing.assert_allclose(loss_f, loss_l, rtol=1e-6)
    np.testing.assert_allclose(pen_f, pen_l, rtol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5,
                                                         atol=1e-7),
                 g_fairseq, g_literal)
    # The readings really differ: kappa = 100 dominates the W_Q gradient.
    q_f = g_fairseq["decoder"]["block_0"]["attn"]["query"]["kernel"]
    q_k = g_kappa["decoder"]["block_0"]["attn"]["query"]["kernel"]
    self.assertGreater(float(jnp.abs(q_k - q_f).max()),
                       10 * float(jnp.abs(q_f).max()))

  @testutil.slow("a train step per reading; step_reference_test checks both "
                 "readings' updates against NumPy")
  def test_train_step_applies_the_factor(self):
    # build_steps reads the factor from the config: one step of fairseq
    # with kappa equals one step of mean_loss with kappa / N.
    fairseq = _smoke_lm("summed_loss")
    n = fairseq.data.batch_size * fairseq.data.seq_len
    p_f, m_f = _one_step(fairseq)
    p_l, m_l = _one_step(_smoke_lm("mean_loss", KAPPA1 / n, KAPPA2 / n))
    _, m_k = _one_step(_smoke_lm("mean_loss"))
    for key in ("loss", "penalty", "grad_norm"):
      np.testing.assert_allclose(m_f[key], m_l[key], rtol=1e-5, err_msg=key)
    # The logged penalty is the one in the objective: kappa's / N.
    np.testing.assert_allclose(m_f["penalty"], m_k["penalty"] / n, rtol=1e-5)
    self.assertGreater(float(m_k["grad_norm"]), 2 * float(m_f["grad_norm"]))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5,
                                                         atol=1e-7),
                 p_f, p_l)

  @testutil.slow("three train steps; a zero penalty times either reading's "
                 "factor is zero, and step_reference_test checks both "
                 "readings' updates against NumPy")
  def test_no_locater_member_is_the_same_under_both_readings(self):
    # kappa1 = kappa2 = 0: the factor multiplies a zero penalty, so both
    # readings train the same member bit for bit (qkspec.report.writer
    # shares such members between the readings' cells).
    p_l, m_l = _one_step(_smoke_lm("mean_loss", 0.0, 0.0))
    p_f, m_f = _one_step(_smoke_lm("summed_loss", 0.0, 0.0))
    for key in ("loss", "penalty", "grad_norm"):
      np.testing.assert_array_equal(m_f[key], m_l[key], err_msg=key)
    jax.tree.map(np.testing.assert_array_equal, p_f, p_l)
    p_k, _ = _one_step(_smoke_lm("summed_loss", KAPPA1, 0.0))   # can fail
    self.assertFalse(all(np.array_equal(a, b) for a, b in zip(
        jax.tree.leaves(p_k), jax.tree.leaves(p_l))))


class ConfigVariantTest(parameterized.TestCase):

  @parameterized.parameters(
      (locater_wt2, "", 64 * 64), (locater_wt2, "smoke", 64),
      (depth_width, "L=3,d=32", 64 * 64), (depth_width, "L=6,d=128,smoke", 64),
      (rho_training, "", 64 * 64), (rho_training, "smoke", 64))
  def test_fairseq_argument_sets_the_reading(self, module, arg, tokens):
    plain = module.get_config(arg)
    variant = module.get_config(",".join(filter(None, (arg, "fairseq"))))
    for c in (plain, variant):
      schema.validate(c)
    self.assertEqual(plain.locater.penalty_added_to, "mean_loss")
    self.assertEqual(variant.locater.penalty_added_to, "summed_loss")
    self.assertEqual(step_lib.penalty_scale_of(variant), 1.0 / tokens)
    # Nothing else changes: kappa stays as printed.
    plain.locater.penalty_added_to = "summed_loss"
    self.assertEqual(plain.to_dict(), variant.to_dict())

  @parameterized.parameters("fairseq", "sum", "", None, 1.0)
  def test_bad_value_is_rejected_naming_the_key(self, value):
    d = locater_wt2.get_config("smoke").to_dict()
    d["locater"]["penalty_added_to"] = value      # any type, as from JSON
    c = ml_collections.ConfigDict(d)
    with self.assertRaisesRegex(
        ValueError, r"config\.locater\.penalty_added_to must be one of "
        r"\('mean_loss', 'summed_loss'\)"):
      schema.validate(c)


class SeedsArgumentTest(parameterized.TestCase):

  @parameterized.parameters((locater_wt2, ""), (locater_wt2, "fairseq,"),
                            (depth_width, "L=3,d=32,"))
  def test_seeds_sweeps_every_kappa2_member_over_seeds(self, module, arg):
    c = module.get_config(arg + "seeds=3")
    schema.validate(c)
    self.assertEqual(c.sweep.mode, "product")
    members = sweep.members(c)
    self.assertLen(members, 3 * len(defaults.KAPPA2_SWEEP))
    self.assertEqual({(m["seed"], m["kappa2"]) for m in members},
                     {(s, k) for s in range(3) for k in defaults.KAPPA2_SWEEP})
    names = [sweep.member_name(m, sweep.swept_keys(c)) for m in members]
    self.assertIn("seed=2,kappa2=0.01", names)
    self.assertLen(set(names), len(names))

  def test_one_seed_is_the_default(self):
    self.assertEqual(locater_wt2.get_config("seeds=1").to_dict(),
                     locater_wt2.get_config().to_dict())

  def test_rho_training_repeats_both_members_per_seed(self):
    c = rho_training.get_config("smoke,seeds=2")
    schema.validate(c)
    self.assertEqual(
        [(m["seed"], m["kappa1"], m["kappa2"]) for m in sweep.members(c)],
        [(0, 100.0, 1.0), (0, 0.0, 0.0), (1, 100.0, 1.0), (1, 0.0, 0.0)])

  def test_zero_seeds_is_rejected(self):
    with self.assertRaisesRegex(ValueError, "seeds must be >= 1"):
      depth_width.get_config("seeds=0")


@testutil.slow("a run trained, then resumed under the other reading")
class ResumeTest(absltest.TestCase):

  def test_resuming_with_the_other_reading_is_refused(self):
    # pylint: disable-next=g-import-not-at-top
    from qkspec.training import loop
    config = locater_wt2.get_config("smoke")
    config.sweep.kappa2 = ()
    config.num_steps = config.checkpoint_every = 2
    with tempfile.TemporaryDirectory() as tmp:
      loop.train_and_evaluate(config, tmp)
      other = locater_wt2.get_config("smoke,fairseq")
      other.sweep.kappa2 = ()
      other.num_steps = other.checkpoint_every = 2
      with self.assertRaisesRegex(
          ValueError, "locater.penalty_added_to 'mean_loss' -> 'summed_loss'"):
        loop.train_and_evaluate(other, tmp)
      loop.train_and_evaluate(config, tmp)      # the same reading resumes


if __name__ == "__main__":
  absltest.main()
