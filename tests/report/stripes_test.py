"""Tests for qkspec.report.stripes: stripes, not noise or smooth trends."""
from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from qkspec.report import run_cells
from qkspec.report import stripes
import report_fixtures

S, T = report_fixtures.RHO_S, report_fixtures.RHO_T
_I = np.arange(T)
_X = report_fixtures.RHO_X                                # positions in [0, 1]


def _spikes(seed=2):
  """Three positions spike to 0.9 at each step, new ones every step."""
  rng = np.random.default_rng(seed)
  out = np.full((S, T), 0.4)
  for s in range(S):
    out[s, rng.choice(T, 3, replace=False)] = 0.9
  return out


class StripeTest(parameterized.TestCase):

  def test_light_and_dark_stripes_are_stripes(self):
    r = stripes.stripe_test(
        report_fixtures.rho_map(report_fixtures.striped_profile()))
    self.assertTrue(r["stripes"], r)
    self.assertLess(r["p_value"], stripes.P_VALUE)
    self.assertIn(r["position"] - 1, (5, 11, 20))    # 1-based
    self.assertGreater(r["departure"], 0.3)

  def test_stripes_on_a_gradient_are_stripes(self):
    r = stripes.stripe_test(
        report_fixtures.rho_map(
            report_fixtures.striped_profile() - 0.3 + 0.5 * _X))
    self.assertTrue(r["stripes"], r)

  @parameterized.named_parameters(
      ("linear", 0.1 + 0.8 * _X),
      ("rising_to_the_query", 0.1 + 0.8 * np.exp(-(T - 1 - _I) / 6)),
      ("sigmoid", 0.1 + 0.8 / (1 + np.exp(-(_X - 0.5) * 12))))
  def test_a_smooth_gradient_is_no_stripes(self, profile):
    rho = report_fixtures.rho_map(profile)
    # The spread of the time-averaged profile (the earlier test's C) is
    # large: that test called every such map striped.
    self.assertGreater(np.std(rho.mean(0)), 0.15)
    r = stripes.stripe_test(rho)
    self.assertFalse(r["stripes"], r)
    self.assertLess(r["departure"], stripes.MIN_DEPARTURE)

  def test_noise_and_spikes_that_move_are_no_stripes(self):
    for rho in (report_fixtures.rho_map(0.5, noise=0.2), _spikes()):
      r = stripes.stripe_test(rho)
      self.assertFalse(r["stripes"], r)
      self.assertGreater(r["p_value"], stripes.P_VALUE, r)

  def test_the_same_spikes_held_in_place_are_stripes(self):
    rho = np.full((S, T), 0.4)
    rho[:, [3, 17, 25]] = 0.9
    r = stripes.stripe_test(report_fixtures.rho_map(rho))
    self.assertTrue(r["stripes"], r)

  def test_a_faint_but_persistent_departure_is_not_salient(self):
    profile = 0.5 + 0.02 * np.sign(np.sin(_I))
    r = stripes.stripe_test(report_fixtures.rho_map(profile, noise=0.002))
    self.assertLess(r["p_value"], stripes.P_VALUE)       # persistent ...
    self.assertFalse(r["stripes"], r)                    # ... but faint

  def test_the_salience_threshold_is_absolute_on_rho_s_range(self):
    """Held-in-place stripes of height h on a flat 0.4: D = h, whatever the
    map's own range; 0.1 of rho's [0, 1] divides salient from faint."""
    for height, want in ((0.9 * stripes.MIN_DEPARTURE, False),
                         (1.1 * stripes.MIN_DEPARTURE, True)):
      rho = np.full((S, T), 0.4)
      rho[:, [5, 11, 20]] += height
      r = stripes.stripe_test(report_fixtures.rho_map(rho, noise=0.01))
      self.assertLess(r["p_value"], stripes.P_VALUE)        # persistent
      self.assertAlmostEqual(r["departure"], height, delta=0.01)
      # a tenth of the map's own range would call both salient
      self.assertGreater(r["departure"], 0.1 * np.ptp(rho))
      self.assertEqual(r["stripes"], want, (height, r))

  def test_constant_and_linear_maps_depart_by_nothing(self):
    for rho in (np.ones((S, T)), np.linspace(0, 1, T) * np.ones((S, 1))):
      r = stripes.stripe_test(rho)
      self.assertAlmostEqual(r["departure"], 0.0)
      self.assertEqual(r["p_value"], 1.0)
      self.assertFalse(r["stripes"])

  def test_departures_against_a_loop(self):
    rho = report_fixtures.rho_map(report_fixtures.striped_profile())
    d = stripes.departures(rho)
    for s, i in ((0, 1), (7, 11), (S - 1, T - 2)):
      self.assertAlmostEqual(d[s, i - 1],
                             rho[s, i] - (rho[s, i - 1] + rho[s, i + 1]) / 2)

  def test_descriptions_and_bad_shapes(self):
    with self.assertRaisesRegex(ValueError, "positions >= 3"):
      stripes.stripe_test(np.ones((5, 2)))
    self.assertEqual(stripes.describe(
        {"departure": 0.25, "position": 12, "p_value": 0.005,
         "stripes": True}),
                     "stripes (D = 0.25 at key 12, shift test p = 0.005)")
    kept = {"contrast": 0.206, "p_value": 0.00498, "stripes": True}
    self.assertTrue(stripes.earlier_result(kept))
    self.assertEqual(stripes.describe(kept),
                     "stripes (C = 0.206, permutation p = 0.00498)")


def _fig7(locater, none, reading="mean_loss", step=50_000):
  """A Fig. 7 run: LocATER's and no LocATER's rho maps (or, where a map
  is None, a record's kept result of the earlier test)."""
  members = []
  for kappa1, rho in ((100.0, locater), (0.0, none)):
    m = report_fixtures.member(kappa1, kappa1 / 100, step=step,
                               reading=reading)
    if rho is None:
      m["stripes"] = {"contrast": 0.2, "p_value": 0.00498, "stripes": True}
    else:
      m["metrics"]["l0/rho"] = (
          np.linspace(step / len(rho), step, len(rho)).astype(int), rho)
    members.append(m)
  return report_fixtures.run("rho", members, "Fig. 7", reading)


_STRIPED = report_fixtures.rho_map(report_fixtures.striped_profile())
_GRADIENT = report_fixtures.rho_map(0.1 + 0.8 * _X)


def _verdicts(*runs):
  return stripes.stripe_verdicts(run_cells.cells(runs), stripes.results(runs))


class StripeVerdictTest(absltest.TestCase):

  def test_stripes_with_locater_only_is_reproduced(self):
    cases = {(True, False): "reproduced", (False, True): "reversed",
             (True, True): "not reproduced", (False, False): "not reproduced"}
    for (with_, without), want in cases.items():
      [v] = _verdicts(_fig7(_STRIPED if with_ else _GRADIENT,
                            _STRIPED if without else _GRADIENT))
      self.assertEqual(v.verdict, want, (with_, without))
      self.assertEqual((v.locater, v.without), ((1, with_), (1, without)))
      self.assertFalse(v.kept or v.earlier)
    [v] = _verdicts(_fig7(_STRIPED, _GRADIENT, step=5_000))
    self.assertEqual(v.steps, 5_000)

  def test_each_map_is_tested_once(self):
    run = _fig7(_STRIPED, _GRADIENT)
    found = stripes.results([run])
    self.assertEqual(sorted(found), [("rho", 0), ("rho", 1)])
    self.assertEqual(found["rho", 0], stripes.stripe_test(_STRIPED))
    [v] = stripes.stripe_verdicts(run_cells.cells([run]), found)
    self.assertEqual(v.p_values, (found["rho", 0]["p_value"],
                                  found["rho", 1]["p_value"]))

  def test_the_earlier_test_s_stripes_leave_it_undetermined(self):
    """It calls a smooth gradient stripes: stripes in both maps may be
    stripes in neither; a LocATER map without them still says "not
    reproduced", as the earlier test finds too many, not too few."""
    [v] = _verdicts(_fig7(None, None))
    self.assertEqual(v.verdict, stripes.UNDECIDED)
    self.assertTrue(v.kept and v.earlier)
    run = _fig7(None, None)
    run.members[0]["stripes"] = dict(run.members[0]["stripes"],
                                     stripes=False)
    [v] = _verdicts(run)
    self.assertEqual(v.verdict, "not reproduced")

  def test_no_fig7_run_no_verdict(self):
    self.assertEqual(_verdicts(*report_fixtures.sweep("s", "Fig. 6")), ())


if __name__ == "__main__":
  absltest.main()
