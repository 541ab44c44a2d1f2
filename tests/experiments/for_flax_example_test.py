"""Tests for qkspec.experiments.for_flax_example: the smoke run's tables."""

from absl.testing import absltest
import numpy as np

from qkspec.experiments import for_flax_example
import testutil


@testutil.slow("the worked example trained twice and drawn; the functions it "
               "calls are tested in qk_test.py and attention_test.py")
class ExampleTest(absltest.TestCase):

  def test_smoke_run_writes_tables_and_locater_lowers_the_scale(self):
    workdir = testutil.workdir(self)
    config = testutil.get_config("for_flax_example", "smoke")
    out = for_flax_example.run(config, workdir)
    testutil.assert_files(self, workdir, (
        "spectrum.csv", "attention.json", "summary.csv",
        "fig_for_flax_example.png"))
    scale = {}
    for r in out["spectrum"]:
      scale.setdefault(r["stage"], []).append(r["scale"])
    heads = 2 * config.num_layers
    self.assertEqual({k: len(v) for k, v in scale.items()},
                     dict(init=heads, plain=heads, locater=heads))
    self.assertTrue(np.all(np.less(scale["locater"], scale["init"])), scale)
    self.assertTrue(np.all(np.less(scale["locater"], scale["plain"])), scale)
    entropy = [r["entropy"] for r in out["attention"]]
    self.assertLen(entropy, 3 * heads)
    self.assertTrue(np.all(np.isfinite(entropy)))


if __name__ == "__main__":
  absltest.main()
