"""Tests for qkspec.report.claims: Fig. 7's stripe verdicts."""
from absl.testing import absltest
import numpy as np

from qkspec.report import answer
from qkspec.report import claims
from qkspec.report import stripes
import report_fixtures


def _rho_run(striped_locater: bool, striped_none: bool, seeds=(0,)):
  """A Fig. 7 run whose rho maps have (or lack) a persistent profile."""
  rng = np.random.default_rng(0)
  steps = np.arange(1, 21) * 250

  def rho(striped):
    noise = rng.normal(0.5, 0.05, (len(steps), 16))
    profile = np.where(np.arange(16) % 4 == 0, 0.3, 0.0) if striped else 0.0
    return np.clip(noise + profile, 0.0, 1.0)
  run = report_fixtures.loaded_run("rho", seeds, 50_000, kappa2=(),
                                   label="Fig. 7")
  for seed in seeds:
    for kappa1, striped in ((100.0, striped_locater), (0.0, striped_none)):
      run["members"].append(dict(
          seed=seed, kappa1=kappa1, kappa2=kappa1 / 100, target=1.0,
          last_step=50_000, metrics={"l0/rho": (steps, rho(striped))}))
  return run


class StripeVerdictTest(absltest.TestCase):

  def test_stripes_with_locater_only_is_reproduced(self):
    cases = {(True, False): "reproduced", (False, True): "reversed",
             (True, True): "not reproduced", (False, False): "not reproduced"}
    for (with_, without), want in cases.items():
      [v] = claims.stripe_verdicts(
          [_rho_run(with_, without, seeds=(0, 1))])
      self.assertEqual(v["verdict"], want, (with_, without))
      self.assertIn(f"stripes in {2 * with_} of 2 LocATER maps and "
                    f"{2 * without} of 2 without", v["text"])
      self.assertNotIn("shortened", v["text"])
    run = _rho_run(True, False)
    for m in run["members"]:
      m["last_step"] = 5_000
    [v] = claims.stripe_verdicts([run])
    self.assertIn("shortened: 5,000 of 50,000 steps", v["text"])

  def test_no_fig7_run_no_line(self):
    self.assertEqual(
        claims.stripe_verdicts([report_fixtures.loaded_run("s0", (0,),
                                                           50_000)]), [])


def _fig7_run(locater, none):
  """A Fig. 7 run: LocATER's and no LocATER's rho maps (or, where a map
  is None, a record's kept result of the earlier test)."""
  members = []
  for kappa1, rho in ((100.0, locater), (0.0, none)):
    m = dict(seed=0, kappa1=kappa1, kappa2=kappa1 / 100, target=1.0,
             last_step=50_000, metrics={})
    if rho is None:
      m["stripes"] = {"contrast": 0.2, "p_value": 0.00498, "stripes": True}
    else:
      m["metrics"]["l0/rho"] = (
          np.arange(1, report_fixtures.RHO_S + 1) * 250, rho)
    members.append(m)
  return dict(run_dir="rho", figure="7", smoke=False, label="Fig. 7",
              reading="mean_loss", command="", members=members,
              final_step=50_000, num_steps=50_000)


class StripeVerdictWordsTest(absltest.TestCase):

  def test_maps_give_the_rule_and_no_caveat(self):
    [v] = claims.stripe_verdicts([_fig7_run(
        report_fixtures.rho_map(report_fixtures.striped_profile()),
        report_fixtures.rho_map(0.1 + 0.8 * report_fixtures.RHO_X))])
    self.assertEqual(v["verdict"], "reproduced")
    self.assertFalse(v["kept"] or v["earlier"])
    self.assertIn(f"({stripes.RULE})", v["text"])
    self.assertEqual(v["p_values"], [r["p_value"] for r in (
        stripes.stripe_test(m["metrics"]["l0/rho"][1])
        for m in _fig7_run(
            report_fixtures.rho_map(report_fixtures.striped_profile()),
            report_fixtures.rho_map(0.1 + 0.8 * report_fixtures.RHO_X)
        )["members"])])
    line = "\n".join(answer.answer([], [v]))
    self.assertIn("**Stripes in rho_i (Fig. 7): reproduced, by the shift "
                  "test (qkspec/report/stripes.py).**", line)
    self.assertNotIn("superseded", line)

  def test_results_of_the_earlier_test_say_so(self):
    [v] = claims.stripe_verdicts([_fig7_run(None, None)])
    self.assertEqual(v["verdict"], "not reproduced")
    self.assertTrue(v["kept"] and v["earlier"])
    self.assertIn(f"({stripes.EARLIER_RULE})", v["text"])
    line = "\n".join(answer.answer([], [v]))
    self.assertIn("**Stripes in rho_i (Fig. 7): not reproduced, by the "
                  "superseded test.**", line)
    self.assertIn("That test (the spread of the time-averaged profile) also "
                  "counts a smooth gradient over positions as stripes; the "
                  "records keep its results, not the rho maps, so the shift "
                  "test that replaces it (qkspec/report/stripes.py) needs the "
                  "rerun listed first under \"Still to run\".", line)


if __name__ == "__main__":
  absltest.main()
