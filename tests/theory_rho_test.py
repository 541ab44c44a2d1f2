"""Smoke and correctness tests of the paper experiments (Figs. 2-5)."""
import json
import math
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

from absl import flags
from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np
from scipy import special

from qkspec.theory import diagnostics
from qkspec.theory import propagation
from qkspec.theory import randomwalk
from qkspec.theory import spectrum
from qkspec.experiments import chunked
from qkspec.experiments import entropy_bound
from qkspec.experiments import entropy_check
from qkspec.experiments import for_flax_example
from qkspec.experiments import inputs
from qkspec.experiments import outputs
from qkspec.experiments import rank_collapse
from qkspec.experiments import simulate_grid
from qkspec.experiments import simulate_rho
from qkspec.experiments import spectrum_collapse
from qkspec.experiments import theory_rho
import testutil


EXPERIMENTS = {m.__name__.rsplit(".", 1)[-1]: m for m in (
    theory_rho, entropy_bound, simulate_rho, simulate_grid, rank_collapse,
    spectrum_collapse, entropy_check, for_flax_example)}


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


def _eq6_rho(theta, xi, eta, variant):
  """Eq. (6) in float64 NumPy: c(theta) = 2 theta^2 + 7/12 as printed,
  less 2 theta re-derived ("corrected")."""
  c = 2 * theta**2 + 7 / 12 - (2 * theta if variant == "corrected" else 0)
  root, z = np.sqrt(2 * c), (theta - 0.5) * xi
  return 0.5 * (special.erf(z / root) - special.erf((z - 1 / eta) / root))


def _eq6_slope(theta, xi, eta, variant, h=1e-6):
  return (_eq6_rho(theta + h, xi, eta, variant)
          - _eq6_rho(theta - h, xi, eta, variant)) / (2 * h)


def _lemma2_deviations(config) -> list[tuple[str, str, float, float]]:
  """(case, variant, max deviation, tolerance) of each Lemma 2 check of
  `theory_rho.lemma2_table`, in its order, computed here."""
  lem, out = config.lemma2, []
  theta = np.linspace(0.0, 1.0, config.num_theta)
  for variant in config.variants:
    for r in lem.r_values:                    # (1-2): |xi| -> inf, xi eta = r
      rho = _eq6_rho(theta, np.sign(r) * lem.xi, abs(r) / lem.xi, variant)
      edge = 0.5 + 1 / r
      limit = ((theta >= 0.5) & (theta <= edge) if r > 0
               else (theta >= edge) & (theta <= 0.5))
      keep = (np.abs(theta - 0.5) > lem.exclude) & (
          np.abs(theta - edge) > lem.exclude)
      case = ("1" if r > 0 else "2") + (
          " middle-site" if abs(r) > 2 else
          (" late-site" if r > 0 else " early-site"))
      if r < -2:
        case += " (mirrored)"
      out.append((case, variant, np.abs(rho - limit)[keep].max(), lem.tol))
    for eta in lem.uniform_etas:              # (3): rho' -> its xi = 0 value
      dev = np.abs(_eq6_slope(theta, min(lem.uniform_xis), eta, variant)
                   - _eq6_slope(theta, 0.0, eta, variant)).max()
      out.append(("3 uniformity (xi-part of rho')", variant, dev,
                  lem.slope_tol))
    for eta in lem.zero_xi_etas:              # (3) as printed: rho' -> 0
      out.append(("3 uniformity as printed (|rho'| at xi=0)", variant,
                  np.abs(_eq6_slope(theta, 0.0, eta, variant)).max(),
                  lem.slope_tol))
    for xi in lem.vanish_xis:                 # (4): rho -> 0 as eta -> inf
      out.append(("4 vanishing", variant,
                  np.abs(_eq6_rho(theta, xi, lem.vanish_eta, variant)).max(),
                  lem.tol))
  return [(case, variant, float(dev), tol) for case, variant, dev, tol in out]


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

  def test_lemma2_table_recomputed_from_eq6(self):
    """Each row of lemma2.csv: its deviation recomputed from Eq. (6) in
    NumPy (`_eq6_rho`, slopes by central differences) against Lemma 2's
    limits written here, and its `passed` column the verdict of that."""
    config = testutil.get_config("theory_rho", "smoke")
    rows = outputs.read_csv(self.workdir / "lemma2.csv")
    want = _lemma2_deviations(config)
    self.assertEqual([(r["case"], r["variant"]) for r in rows],
                     [(case, variant) for case, variant, _, _ in want])
    for row, (_, _, dev, tol) in zip(rows, want):
      np.testing.assert_allclose(float(row["max_abs_deviation"]), dev,
                                 rtol=1e-3, atol=2e-5, err_msg=str(row))
      self.assertEqual(float(row["tolerance"]), tol, row)
      self.assertEqual(row["passed"], str(dev <= tol), row)

  def test_lemma2_limits_hold_under_both_variants(self):
    checked = [(case, variant, dev, tol) for case, variant, dev, tol
               in _lemma2_deviations(testutil.get_config("theory_rho",
                                                         "smoke"))
               if not case.startswith("3 uniformity as printed")]
    self.assertLen({variant for _, variant, _, _ in checked}, 2)
    for case, variant, dev, tol in checked:
      self.assertLessEqual(dev, tol, (case, variant))

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
    # shared (default) design is tested in grid_estimator_test.py.
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


class ConfigTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("negative_eigen_std", "simulate_rho", "pairs", ((0.0, -1.0),)),
      ("negative_temperature", "simulate_rho", "temperature", -1.0),
      ("bad_std_range", "simulate_grid", "eigen_std_range", (0.0, 1.0)),
      ("no_eigen_stds", "simulate_grid", "num_eigen_stds", 0),
      ("negative_stds", "spectrum_collapse", "eigen_stds", (-0.1,)),
      ("zero_temperature", "spectrum_collapse", "temperature", 0.0),
      ("bad_pairs", "entropy_check", "pairs", ((0.0, -1.0),)),
      ("negative_rc_temperature", "rank_collapse", "temperature", -2.0),
      ("zero_rc_temperature", "rank_collapse", "temperature", 0.0),
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
      ("heads_not_dividing_d", "for_flax_example", "num_heads", 3),
  )
  def test_bad_config_raises_naming_the_field(self, name, field, value):
    config = testutil.get_config(name, "smoke")
    config[field] = value
    workdir = _workdir(self)
    with self.assertRaisesRegex(ValueError, f"config.{field}"):
      EXPERIMENTS[name].run(config, workdir)
    self.assertFalse(workdir.exists(), "failed before writing anything")

  def test_unknown_config_arg_raises(self):
    with self.assertRaisesRegex(ValueError, "smoke"):
      testutil.get_config("simulate_rho", "smok")

  @parameterized.parameters(*EXPERIMENTS)
  def test_config_names_its_experiment_and_validates(self, name):
    for arg in (None, "smoke"):
      config = testutil.get_config(name, arg)
      self.assertEqual(config.experiment, name)
      EXPERIMENTS[name].validate(config)
      if "temperature" in config:
        self.assertIsNone(config.temperature, f"{name}: default lambda")

  def test_grid_fields_parse_on_the_command_line(self):
    argv = ["prog", "--config",
            str(testutil.ROOT / "configs" / "simulate_grid.py:smoke"),
            "--config.eigen_std_range=(0.1, 1.0)", "--config.num_eigen_stds=3",
            "--config.temperature=2.0"]
    flag_values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=flag_values,
                                    lock_config=True, sys_argv=argv)
    flag_values(argv)
    config = flag_values.config
    self.assertEqual(config.temperature, 2.0)
    self.assertEqual(tuple(config.eigen_std_range), (0.1, 1.0))
    simulate_grid.validate(config)
    _, stds = simulate_grid.grid_axes(config)
    np.testing.assert_allclose(stds, [0.1, math.sqrt(0.1), 1.0], rtol=1e-6)


class HelpersTest(parameterized.TestCase):

  def test_require_ints(self):
    config = testutil.get_config("simulate_rho", "smoke")
    outputs.require_ints(config, {"dim": 1, "seq_len": 2})
    config.seq_len = 1
    with self.assertRaisesRegex(ValueError, "config.seq_len must be an "
                                "integer >= 2"):
      outputs.require_ints(config, {"dim": 1, "seq_len": 2})

  @parameterized.parameters(1, 3, 7, 8)
  def test_map_chunks_equals_one_unchunked_call(self, chunk):
    calls = []

    @jax.jit
    def fn(a_P, b_Px2):
      return dict(x=2 * a_P + b_Px2[:, 0],
                  y=jnp.stack([a_P, b_Px2[:, 1] ** 2], axis=-1))

    def counted(*args):
      calls.append(args[0].shape)
      return fn(*args)

    a = np.arange(7, dtype=np.float32)                  # odd: padded
    b = np.arange(14, dtype=np.float32).reshape(7, 2)
    out = chunked.map_chunks(counted, (a, b), chunk, "test")
    chex.assert_trees_all_equal(out, jax.tree.map(np.asarray, fn(a, b)))
    self.assertEqual(calls, [(chunk,)] * -(-7 // chunk))

  def test_pad_points_repeats_the_last_point(self):
    (a, b), num_chunks = chunked.pad_points(
        (np.arange(5), np.arange(10).reshape(5, 2)), 3)
    self.assertEqual(num_chunks, 2)
    np.testing.assert_array_equal(a, [0, 1, 2, 3, 4, 4])
    np.testing.assert_array_equal(b[-2:], [[8, 9], [8, 9]])
    with self.assertRaisesRegex(ValueError, "rows"):
      chunked.pad_points((np.arange(5), np.arange(4)), 3)


class LaunchTest(absltest.TestCase):

  def test_launch_script_with_override(self):
    workdir = _workdir(self)
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
