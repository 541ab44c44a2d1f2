"""Tests for qkspec.experiments.simulate_rho: Fig. 5's sweep, both designs."""
import math
import pathlib
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import numpy as np

from qkspec.theory import propagation
from qkspec.theory import randomwalk
from qkspec.theory import spectrum
from qkspec.experiments import inputs
from qkspec.experiments import outputs
from qkspec.experiments import simulate_rho
import testutil


class SimulationTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = testutil.get_config("simulate_rho", "smoke")
    # The draw-by-draw identities below are those of the fresh design; the
    # shared (default) design is tested in grid_estimator_test.py and
    # SharedDesignTest below.
    cls.config.design = "fresh"
    cls.workdir = pathlib.Path(tempfile.mkdtemp()) / "simulate"
    cls.addClassCleanup(shutil.rmtree, cls.workdir.parent, ignore_errors=True)
    cls.result = simulate_rho.run(cls.config, cls.workdir)

  def test_writes_figures_tables_and_config(self):
    testutil.assert_files(self, self.workdir, [
        "config.json", "fig5_simulation.png", "fig5_gaussian_vs_mc.png",
        "simulate_rho.csv", "simulate_rho.json", "simulate_pairs.csv",
        "simulate_errors.json"])
    c = self.config
    num_c, num_p = len(c.covariances), len(c.pairs)
    self.assertLen(outputs.read_csv(self.workdir / "simulate_rho.csv"),
                   num_c * num_p * c.seq_len)
    out = self.result["out"]
    chex.assert_shape(out["rho"], (num_c, num_p, c.num_draws, c.seq_len))
    chex.assert_shape(out["entropy"], (num_c, num_p, c.num_draws))
    chex.assert_tree_all_finite(out)
    self.assertTrue(np.all((out["rho"] >= 0) & (out["rho"] <= 1)))
    self.assertTrue(np.all(out["entropy"] <= math.log(c.seq_len) + 1e-5))

  @parameterized.parameters((0, 0, 0), (1, 1, 1), (1, 2, 0))
  def test_sweep_equals_naive_functions_on_one_draw(self, c, p, k):
    """The vmapped sweep vs rho_monte_carlo & friends for the same key and W."""
    cfg = self.config
    out = self.result["out"]
    mean, scale = cfg.pairs[p]
    cov = inputs.covariances(cfg)[c]
    key = simulate_rho.draw_key(jax.random.key(cfg.seed), c, p, k)
    key_w, key_x = jax.random.split(key)
    w = spectrum.sample_qk(key_w, cfg.dim, mean, scale)
    rho = propagation.rho_monte_carlo(
        key_x, w, num_sequences=cfg.num_sequences, seq_len=cfg.seq_len,
        cov=cov)
    # Same walks and W; only float rounding of batched vs unbatched matmuls
    # could flip one sequence's event, so allow at most 1/N.
    np.testing.assert_allclose(out["rho"][c, p, k], rho,
                               atol=1.0 / cfg.num_sequences + 1e-7)
    x = np.asarray(randomwalk.random_walk(
        key_x, cfg.num_sequences, cfg.seq_len, cfg.dim, cov), np.float64)
    logits = x @ np.asarray(w, np.float64) @ x.transpose(0, 2, 1)
    logits /= np.sqrt(cfg.dim)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    entropy = -np.sum(probs * np.log(np.maximum(probs, 1e-300)), -1).mean()
    np.testing.assert_allclose(out["entropy"][c, p, k], entropy, rtol=2e-3,
                               atol=2e-3)
    for name, (exact, variant) in simulate_rho.GAUSSIAN.items():
      np.testing.assert_allclose(
          out[f"rho_{name}"][c, p, k],
          propagation.rho_from_spectrum(w, cfg.seq_len, cov, exact=exact,
                                        variant=variant), atol=1e-5)

  def test_default_temperature_is_explicit_sqrt_dim(self):
    config = self.config.copy_and_resolve_references()
    self.assertIsNone(config.temperature)
    config.temperature = math.sqrt(config.dim)
    out = simulate_rho.sweep_from_config(config)
    chex.assert_trees_all_equal(out, self.result["out"])

  def test_tables_name_the_eigenvalue_distribution(self):
    row = self.result["pairs"][0]
    self.assertContainsSubset({"eigen_mean", "eigen_std"}, row)
    self.assertNotIn("scale", row)
    self.assertEqual((row["eigen_mean"], row["eigen_std"]),
                     tuple(self.config.pairs[0]))

  def test_error_table_matches_positions(self):
    errors = self.result["errors"]
    self.assertLen(errors, len(self.config.covariances))
    for row, cov in zip(errors, self.config.covariances):
      rows = [r for r in self.result["positions"] if r["covariance"] == cov]
      for name in simulate_rho.GAUSSIAN:
        worst = max(abs(r[f"rho_{name}"] - r["rho_mc"]) for r in rows)
        np.testing.assert_allclose(row[f"max_abs_err_{name}"], worst,
                                   rtol=1e-6)


class SharedDesignTest(absltest.TestCase):

  def test_simulate_rho_shared_design(self):
    config = testutil.get_config("simulate_rho", "smoke")
    self.assertEqual(config.design, "shared")
    simulate_rho.validate(config)
    out = simulate_rho.sweep_from_config(config)
    num_c, num_p = len(config.covariances), len(config.pairs)
    chex.assert_shape(out["rho"], (num_c, num_p, config.num_draws,
                                   config.seq_len))
    chex.assert_shape(out["rho_exact"], out["rho"].shape)
    chex.assert_shape(out["rho_se"], (num_c, num_p, config.seq_len))
    chex.assert_shape(out["entropy_se"], (num_c, num_p))
    chex.assert_tree_all_finite(out)
    positions, pairs, _ = simulate_rho.tables(out, config)
    self.assertLen(positions, num_c * num_p * config.seq_len)
    for row in pairs:
      self.assertGreaterEqual(row["entropy_se"], 0.0)


if __name__ == "__main__":
  absltest.main()
