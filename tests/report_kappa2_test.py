"""Tests for qkspec.experiments.report_kappa2: planted curves over kappa2."""
from absl.testing import absltest
import numpy as np

from qkspec.experiments import report_kappa2
from qkspec.experiments import report_stats as rs

_KAPPA2 = (0.0, 1e-3, 1e-2, 1e-1, 1.0)


def _rows(ppl_by_kappa2, seeds=(0, 1, 2)):
  """LocATER groups whose seed s has perplexity `ppl_by_kappa2[k][s]`."""
  rows = []
  for kappa2, ppl in zip(_KAPPA2, ppl_by_kappa2):
    ppl = list(np.broadcast_to(ppl, (len(seeds),)))
    rows.append(dict(label="Fig. 6", reading="mean_loss", kappa1=100.0,
                     kappa2=kappa2, seeds=list(seeds), n_seeds=len(seeds),
                     valid_ppl_values=ppl, valid_ppl_mean=float(np.mean(ppl)),
                     entropy_values=[2.8] * len(seeds), entropy_mean=2.8))
  return rows


class TrendTest(absltest.TestCase):

  def test_slope_per_decade_paired_over_seeds(self):
    offsets = np.array([0.0, 3.0, -2.0])                  # seed offsets
    ppl = [240 + offsets + 0.5 * i for i in range(5)]     # +0.5 per decade
    t = report_kappa2.trend(_rows(ppl), "valid_ppl", -1)
    self.assertAlmostEqual(t["slope"], 0.5)
    self.assertEqual(t["best_kappa2"], 1e-3)

  def test_best_is_held_to_the_bonferroni_level(self):
    """A best-of-four difference whose t lies between the 95% and the
    Bonferroni critical values is not significant."""
    t_plain, t_bonf = rs.t_critical(2), rs.t_critical(2, rs.bonferroni(4))
    z = np.array([-1.0, 0.0, 1.0])                        # std 1
    for t_stat, want in (((t_plain + t_bonf) / 2, rs.NOT_SIGNIFICANT),
                         (1.2 * t_bonf, rs.REPRODUCED)):
      d = -1.0 + z * np.sqrt(3) / t_stat          # mean -1, t = t_stat
      ppl = [np.full(3, 240.0), 240.0 + d] + [np.full(3, 240.5)] * 3
      t = report_kappa2.trend(_rows(ppl), "valid_ppl", -1)
      self.assertEqual(t["best_kappa2"], 1e-3)
      self.assertEqual(t["verdict"], want, t)

  def test_one_seed_uses_the_floor_at_the_bonferroni_level(self):
    ref = dict(rel=0.001, n=4)
    floor = rs.t_critical(3, rs.bonferroni(4)) * 0.001 * 240.0
    for d, want in ((0.95 * floor, rs.NOT_SIGNIFICANT),
                    (1.05 * floor, rs.INDICATIVE)):
      ppl = [240.0, 240.0 - d, 241.0, 241.0, 241.0]
      t = report_kappa2.trend(_rows(ppl, seeds=(0,)), "valid_ppl", -1, ref)
      self.assertAlmostEqual(t["floor"], floor)
      self.assertEqual(t["verdict"], want)

  def test_needs_kappa2_zero_and_two_more(self):
    self.assertIsNone(report_kappa2.trend(_rows([240.0, 241.0])[:2],
                                          "valid_ppl", -1))


if __name__ == "__main__":
  absltest.main()
