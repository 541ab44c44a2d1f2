"""Smoke and correctness tests of the paper experiments (Figs. 2-5)."""
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import propagation
from qkspec.theory import randomwalk
from qkspec.theory import spectrum
from qkspec.experiments import entropy_bound
from qkspec.experiments import outputs
from qkspec.experiments import simulate_rho
from qkspec.experiments import theory_rho
import testutil

jax.config.update("jax_numpy_rank_promotion", "raise")

def _workdir(test):
  """A fresh, not yet existing workdir under a temp dir removed after `test`."""
  parent = tempfile.mkdtemp()
  test.addCleanup(shutil.rmtree, parent, ignore_errors=True)
  return pathlib.Path(parent) / "run"


def _assert_files(test, workdir, names):
  for name in names:
    path = workdir / name
    test.assertTrue(path.is_file(), f"missing {path}")
    test.assertGreater(path.stat().st_size, 0, f"empty {path}")


class TheoryTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.workdir = pathlib.Path(tempfile.mkdtemp()) / "theory"
    cls.addClassCleanup(shutil.rmtree, cls.workdir.parent, ignore_errors=True)
    cls.result = theory_rho.run(testutil.get_config("theory_rho", "smoke"),
                            cls.workdir)

  def test_writes_figures_tables_and_config(self):
    _assert_files(self, self.workdir, [
        "config.json", "fig2_paper.png", "fig2_corrected.png",
        "fig2_compare.png", "fig3_localized.png", "fig2_rho.csv",
        "fig3_rho.json", "lemma2.csv", "lemma2.json"])
    rows = outputs.read_csv(self.workdir / "lemma2.csv")
    self.assertLen(rows, len(self.result["lemma2"]))
    saved = json.loads((self.workdir / "config.json").read_text())
    self.assertEqual(saved["num_theta"], 101)

  def test_lemma2_limits_hold_under_both_variants(self):
    rows = self.result["lemma2"]
    checked = [r for r in rows if not r["case"].startswith(
        "3 uniformity as printed")]
    self.assertLen({r["variant"] for r in checked}, 2)
    for row in checked:
      self.assertTrue(row["passed"], row)
      self.assertLessEqual(row["max_abs_deviation"], row["tolerance"], row)

  def test_uniformity_as_printed_fails_at_moderate_eta(self):
    # Lemma 2.3 erratum: at xi = 0, rho = erf(1/(eta sqrt(2c(theta))))/2
    # still depends on theta, so |rho'| does not vanish at eta = 1.
    rows = [r for r in self.result["lemma2"]
            if r["case"].startswith("3 uniformity as printed")
            and r["parameters"] == "xi=0, eta=1"]
    self.assertLen(rows, 2)
    for row in rows:
      self.assertFalse(row["passed"], row)
      self.assertGreater(row["max_abs_deviation"], 0.2)

  def test_fig3_middle_site_band(self):
    theta = np.linspace(0.0, 1.0, 101)
    rho = self.result["fig3"][("corrected", 512.0, 0.01)]
    band = (theta > 0.52) & (theta < 0.5 + 1 / 5.12 - 0.02)
    outside = (theta < 0.48) | (theta > 0.5 + 1 / 5.12 + 0.02)
    np.testing.assert_allclose(rho[band], 1.0, atol=1e-3)
    np.testing.assert_allclose(rho[outside], 0.0, atol=1e-3)

  def test_fig2_grid_matches_rho_theta(self):
    maps = self.result["fig2"]["paper"]
    config = testutil.get_config("theory_rho", "smoke")
    chex.assert_shape(maps, (len(config.eta_values), config.num_xi,
                             config.num_theta))
    xi = jax.numpy.linspace(-config.xi_max, config.xi_max, config.num_xi)
    theta = jax.numpy.linspace(0.0, 1.0, config.num_theta)
    e, x = 1, 7
    np.testing.assert_allclose(
        maps[e, x], propagation.rho_theta(theta, xi[x], config.eta_values[e],
                                          "paper"), atol=1e-5)


class EntropyBoundTest(absltest.TestCase):

  def test_smoke_run_and_bound_exceeds_ln_t_at_zero(self):
    workdir = _workdir(self)
    result = entropy_bound.run(
        testutil.get_config("entropy_bound", "smoke"), workdir)
    _assert_files(self, workdir, [
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


class SimulationTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.config = testutil.get_config("simulate_rho", "smoke")
    # The draw-by-draw identities below are those of the fresh design; the
    # shared (default) design is tested in sweep_fast_test.py.
    cls.config.design = "fresh"
    cls.workdir = pathlib.Path(tempfile.mkdtemp()) / "simulate"
    cls.addClassCleanup(shutil.rmtree, cls.workdir.parent, ignore_errors=True)
    cls.result = simulate_rho.run(cls.config, cls.workdir)

  def test_writes_figures_tables_and_config(self):
    _assert_files(self, self.workdir, [
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
    cov = simulate_rho.covariances(cfg)[c]
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
    x = np.asarray(randomwalk.random_walk(key_x, cfg.num_sequences,
                                          cfg.seq_len, cfg.dim, cov), np.float64)
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

  def test_error_table_matches_positions(self):
    errors = self.result["errors"]
    self.assertLen(errors, len(self.config.covariances))
    for row, cov in zip(errors, self.config.covariances):
      rows = [r for r in self.result["positions"] if r["covariance"] == cov]
      for name in simulate_rho.GAUSSIAN:
        worst = max(abs(r[f"rho_{name}"] - r["rho_mc"]) for r in rows)
        np.testing.assert_allclose(row[f"max_abs_err_{name}"], worst,
                                   rtol=1e-6)


class ConfigTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("negative_scale", "simulate_rho", "pairs", ((0.0, -1.0),)),
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
  )
  def test_bad_config_raises_naming_the_field(self, name, field, value):
    config = testutil.get_config(name, "smoke")
    config[field] = value
    module = {"simulate_rho": simulate_rho, "theory_rho": theory_rho,
              "entropy_bound": entropy_bound}[name]
    workdir = _workdir(self)
    with self.assertRaisesRegex(ValueError, f"config.{field}"):
      module.run(config, workdir)
    self.assertFalse(workdir.exists(), "failed before writing anything")

  def test_unknown_config_arg_raises(self):
    with self.assertRaisesRegex(ValueError, "smoke"):
      testutil.get_config("simulate_rho", "smok")


class LaunchTest(absltest.TestCase):

  def test_launch_script_with_override(self):
    workdir = _workdir(self)
    cmd = [sys.executable, "launch/entropy_bound.py",
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
