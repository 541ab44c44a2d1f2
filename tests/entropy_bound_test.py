"""Tests for qkspec.experiments.entropy_bound: Fig. 4's smoke run, launched."""
import json
import math
import os
import subprocess
import sys

from absl.testing import absltest
import numpy as np

from qkspec.theory import diagnostics
from qkspec.experiments import entropy_bound
import testutil


class EntropyBoundTest(absltest.TestCase):

  def test_smoke_run_and_bound_exceeds_ln_t_at_zero(self):
    workdir = testutil.workdir(self)
    result = entropy_bound.run(
        testutil.get_config("entropy_bound", "smoke"), workdir)
    testutil.assert_files(self, workdir, [
        "config.json", "fig4_entropy_bound.png", "entropy_bound.csv",
        "entropy_bound_summary.json"])
    for row in result["summary"]:
      t = row["seq_len"]
      np.testing.assert_allclose(row["bound_at_nu0"], math.log1p(t),
                                 rtol=1e-6)
      self.assertGreater(row["bound_at_nu0"], math.log(t))
      self.assertTrue(row["bound_exceeds_ln_T_on"].startswith("[0,"), row)
    bound = result["bound"]
    np.testing.assert_allclose(
        bound[1], diagnostics.eq9_entropy(result["nu"], 256),
        rtol=1e-6)

  def test_exceed_intervals(self):
    nu = np.arange(6.0)
    self.assertEqual(entropy_bound.exceed_intervals(
        nu, np.array([1, 1, 0, 0, 1, 1], bool)), [(0.0, 1.0), (4.0, 5.0)])
    self.assertEqual(entropy_bound.exceed_intervals(nu, nu < 0), [])


class LaunchTest(absltest.TestCase):

  def test_launch_script_with_override(self):
    workdir = testutil.workdir(self)
    cmd = [sys.executable, "launch/run.py",
           "--config", "configs/entropy_bound.py:smoke",
           "--config.nu_max=12.0", "--workdir", str(workdir)]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(cmd, cwd=testutil.ROOT, capture_output=True,
                          text=True,
                          env=env, timeout=120, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertIn("fig4_entropy_bound.png", proc.stdout)
    saved = json.loads((workdir / "config.json").read_text())
    self.assertEqual(saved["nu_max"], 12.0)


if __name__ == "__main__":
  absltest.main()
