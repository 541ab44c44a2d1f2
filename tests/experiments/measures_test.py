"""Tests for qkspec.experiments.measures: the collapse depth."""
from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from qkspec.experiments import measures
from qkspec.experiments import spectrum_collapse


class CollapseDepthTest(parameterized.TestCase):

  @parameterized.parameters(
      ([1.0, 0.1, 1e-4, 1e-9], 1e-3, 2),
      ([1.0, 0.5, 0.2], 1e-3, 3),          # never below: L + 1
      ([1e-5, 1.0], 1e-3, 0),
      ([1.0, 1e-3, 9.99e-4], 1e-3, 2),     # strictly below
  )
  def test_collapse_depth_agrees(self, r, threshold, depth):
    """rank_collapse (on r) and spectrum_collapse (on log r) share one depth."""
    self.assertEqual(measures.collapse_depth(np.array(r), threshold), depth)
    summary = spectrum_collapse.collapse_summary(np.log(r), threshold)
    self.assertEqual(summary["collapse_depth"], depth)


if __name__ == "__main__":
  absltest.main()
