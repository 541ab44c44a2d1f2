"""Fig. 7's stripe test: persistent position profiles, not noise or trends."""
from absl.testing import absltest
import numpy as np

from qkspec.experiments import stripes


class StripeTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.rng = np.random.default_rng(1)
    self.S, self.T = 40, 16

  def test_persistent_profile_is_a_stripe(self):
    profile = np.where(np.arange(self.T) % 5 == 0, 0.8, 0.3)
    rho = np.clip(profile + 0.1 * self.rng.standard_normal((self.S, self.T)),
                  0, 1)
    r = stripes.stripe_test(rho)
    self.assertTrue(r["stripes"], r)
    self.assertLess(r["p_value"], 0.01)
    self.assertGreater(r["contrast"], 0.15)

  def test_independent_noise_is_uniform(self):
    rho = np.clip(0.5 + 0.2 * self.rng.standard_normal((self.S, self.T)),
                  0, 1)
    r = stripes.stripe_test(rho)
    self.assertFalse(r["stripes"], r)
    self.assertGreater(r["p_value"], 0.01)

  def test_shared_trend_and_constant_maps_have_no_stripes(self):
    trend = np.linspace(0.1, 0.9, self.S)[:, None] * np.ones((1, self.T))
    self.assertFalse(stripes.stripe_test(trend)["stripes"])
    self.assertEqual(stripes.contrast(trend), 0.0)
    ones = np.ones((self.S, self.T))          # rho = 1 everywhere (W_QK = 0)
    r = stripes.stripe_test(ones)
    self.assertFalse(r["stripes"])
    self.assertEqual(r["p_value"], 1.0)

  def test_a_faint_but_persistent_profile_is_not_salient(self):
    profile = 0.5 + 0.01 * np.sign(np.sin(np.arange(self.T)))
    rho = profile + 0.001 * self.rng.standard_normal((self.S, self.T))
    r = stripes.stripe_test(rho)
    self.assertLess(r["p_value"], 0.01)        # persistent ...
    self.assertFalse(r["stripes"])             # ... but below MIN_CONTRAST

  def test_bad_shape_is_refused(self):
    with self.assertRaisesRegex(ValueError, "steps >= 2"):
      stripes.stripe_test(np.ones(5))
    self.assertIn("no stripes", stripes.describe(
        {"contrast": 0.0, "p_value": 1.0, "stripes": False}))


if __name__ == "__main__":
  absltest.main()
