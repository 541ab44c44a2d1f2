"""Rank collapse (Dong), entropy bounds (Zhai) and their experiments."""
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import entropy_bounds
from qkspec.theory import san
from qkspec.theory import san_paths
from qkspec.experiments import entropy_check
from qkspec.experiments import measures
from qkspec.experiments import rank_collapse
from qkspec.experiments import spectrum_collapse
import testutil


init_params, forward = testutil.jitted_san()


class ResidualTest(parameterized.TestCase):

  @parameterized.parameters(*diagnostics.RESIDUAL_METHODS)
  def test_relative_residual_invariances(self, method):
    x = jax.random.normal(jax.random.key(0), (6, 5))
    r = diagnostics.relative_residual(x, method, num_steps=100)
    np.testing.assert_allclose(
        diagnostics.relative_residual(3.7 * x, method, num_steps=100), r,
        rtol=1e-4)
    perm = np.array([2, 0, 5, 1, 3, 4])
    np.testing.assert_allclose(
        diagnostics.relative_residual(x[perm], method, num_steps=100), r,
        rtol=1e-3)
    if method != "svd":   # res(X) ignores 1 c^T (svd does not, documented)
      c = jax.random.normal(jax.random.key(1), (1, 5))
      np.testing.assert_allclose(
          diagnostics.rank_collapse_residual(x + c, method, num_steps=100),
          diagnostics.rank_collapse_residual(x, method, num_steps=100),
          rtol=2e-3)

  def test_doubly_exponential_collapse_below_the_bound(self):
    """1-head SAN with small weights: c r_0^2 < 1, so Dong's bound applies.

    The measured residual stays below B_l = c^((3^l-1)/2) r_0^(3^l), and
    its order of convergence is ~3 (doubly exponential).
    """
    with jax.enable_x64(True):
      d, t, num_layers = 8, 8, 5
      p = init_params(jax.random.key(0), num_layers=num_layers, num_heads=1,
                      dim=d, qk_gain=0.5)
      x = jax.random.normal(jax.random.key(1), (t, d))
      lam = float(np.sqrt(d))
      c_L = san_paths.cubic_residual_coefficient(p["w_qk"], p["w_v"], lam)
      res = diagnostics.rank_collapse_residual(
          forward(p, x, temperature=lam)["outputs"], "mean")
      # Rescale the input so that c * r_0^2 = 1/4: the bound then contracts.
      x = x * float(0.5 / (jnp.sqrt(c_L.max()) * res[0]))
      out = forward(p, x, temperature=lam)["outputs"]
      res = diagnostics.rank_collapse_residual(out, "mean")
      bound = san_paths.cubic_residual_bound(res[0], jnp.full((num_layers,),
                                                          c_L.max()))
      self.assertLess(float(c_L.max() * res[0]**2), 0.26)
      ok = res > 1e-15 * jnp.sqrt(jnp.sum(out**2, axis=(-2, -1)))
      np.testing.assert_array_less(np.asarray(res)[ok][1:],
                                   np.asarray(bound)[ok][1:])
      rel = diagnostics.relative_residual(out, "mean")
      order, _, pairs = rank_collapse.convergence_order(np.asarray(rel),
                                                        1e-14, 1.0)
      self.assertGreaterEqual(pairs, 2)
      self.assertGreater(order, 2.5)

  def test_skip_connections_prevent_collapse(self):
    with jax.enable_x64(True):
      p = init_params(jax.random.key(0), num_layers=8, num_heads=2, dim=8)
      x = jax.random.normal(jax.random.key(1), (8, 8))
      pure = forward(p, x, san.ARCHITECTURES["san"])["outputs"]
      skip = forward(p, x, san.ARCHITECTURES["san_skip"])["outputs"]
      r_pure = diagnostics.relative_residual(pure, "mean")
      r_skip = diagnostics.relative_residual(skip, "mean")
      self.assertLess(float(r_pure[-1]), 1e-10)
      self.assertGreater(float(r_skip[-1]), 1e-2)

  def test_fit_helpers(self):
    r = [0.5]
    for _ in range(4):
      r.append(2.0 * r[-1]**3)
    order, a, _ = rank_collapse.convergence_order(np.array(r), 1e-300, 0.9)
    self.assertAlmostEqual(order, 3.0, places=6)
    self.assertAlmostEqual(a, np.log(2.0), places=6)
    self.assertGreater(rank_collapse.closed_form_fits(np.array(r), 1e-300)
                       ["dong_r2"], 0.999999)
    order, _, _ = rank_collapse.convergence_order(0.9**np.arange(10.0), 1e-9,
                                                  1.0)
    self.assertAlmostEqual(order, 1.0, places=6)
    self.assertEqual(measures.collapse_depth(np.array([1, 0.1, 1e-4]), 1e-3),
                     2)

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


class EntropyBoundTest(parameterized.TestCase):

  @parameterized.parameters(2, 5, 32)
  def test_zhai_bound_is_tight_and_holds(self, t):
    self.assertAlmostEqual(float(entropy_bounds.zhai_entropy_lower_bound(
        0.0, t)), np.log(t), places=5)
    rng = np.random.default_rng(t)
    for sigma in (0.1, 1.0, 3.0, 10.0):
      # Attained by one key above T-1 equal ones, centred norm = sigma.
      s = np.zeros(t)
      s[0] = sigma * np.sqrt(t / (t - 1.0))
      s -= s.mean()
      s *= sigma / np.linalg.norm(s)
      ent = diagnostics.attention_entropy(jax.nn.softmax(jnp.asarray(s)))
      bound = entropy_bounds.zhai_entropy_lower_bound(sigma, t)
      self.assertAlmostEqual(float(ent), float(bound), places=4)
      # Random rows with the same centred norm have more entropy.
      u = rng.normal(size=(500, t))
      u -= u.mean(1, keepdims=True)
      u *= sigma / np.linalg.norm(u, axis=1, keepdims=True)
      ents = diagnostics.attention_entropy(jax.nn.softmax(jnp.asarray(u)),
                                           reduce=False)
      self.assertGreaterEqual(float(ents.min()), float(bound) - 1e-5)

  def test_zhai_bound_from_nu(self):
    key_x, key_w = jax.random.split(jax.random.key(0))
    x = jax.random.normal(key_x, (4, 10, 6))
    for gain in (0.01, 0.3, 3.0):
      w = gain * jax.random.normal(key_w, (6, 6))
      nu = entropy_bounds.entropy_bound_nu(x, w[None], 2.0)
      logits = jnp.einsum("ntd,de,nje->ntj", x, w, x) / 2.0
      ent = diagnostics.attention_entropy(jax.nn.softmax(logits, -1),
                                          reduce=False)
      bound = entropy_bounds.zhai_entropy_lower_bound(nu, 10)
      np.testing.assert_array_less(
          np.broadcast_to(bound[:, None] - 1e-5, ent.shape), ent)

  def test_entropy_bound_nu_values(self):
    """nu = ||X X^T||_2 ||W_QK||_2 / lambda from NumPy's singular values,
    for lambda = 2, 1 (the paper's nu) and None (sqrt d)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5, 4))
    w = rng.normal(size=(3, 4, 4))
    top = lambda m: np.linalg.svd(m, compute_uv=False)[..., 0]  # noqa: E731
    paper_nu = top(x @ np.swapaxes(x, -1, -2)) * top(w)
    for lam, want in ((2.0, paper_nu / 2), (1.0, paper_nu),
                      (None, paper_nu / 2.0)):       # sqrt(d) = 2
      got = entropy_bounds.entropy_bound_nu(
          jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32), lam)
      np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=str(lam))
    got = entropy_bounds.entropy_bound_nu(
        jnp.asarray(x[:, :, :3], jnp.float32), jnp.asarray(w[:, :3, :3],
                                                           jnp.float32))
    want = (top(x[:, :, :3] @ np.swapaxes(x[:, :, :3], -1, -2))
            * top(w[:, :3, :3]) / np.sqrt(3))
    np.testing.assert_allclose(got, want, rtol=1e-5)

  def test_centred_logit_norm_values(self):
    s = jnp.asarray([[1.0, 2.0, 3.0], [0.0, 0.0, 6.0]])
    # centred rows (-1, 0, 1) and (-2, -2, 4)
    np.testing.assert_allclose(entropy_bounds.centred_logit_norm(s),
                               [np.sqrt(2.0), np.sqrt(24.0)], rtol=1e-6)
    # along axis 0: columns (1, 0), (2, 0), (3, 6)
    np.testing.assert_allclose(entropy_bounds.centred_logit_norm(s, axis=0),
                               [np.sqrt(0.5), np.sqrt(2.0), np.sqrt(4.5)],
                               rtol=1e-6)
    rng = np.random.default_rng(1)
    u = rng.normal(size=(4, 7)) * 3.0 + 5.0
    want = np.sqrt(np.sum((u - u.mean(-1, keepdims=True))**2, axis=-1))
    np.testing.assert_allclose(
        entropy_bounds.centred_logit_norm(jnp.asarray(u, jnp.float32)), want,
        rtol=1e-5)

  def test_eq9_exceeds_max_entropy_at_small_nu(self):
    """Eq. (9) as printed: ln(1+T) > ln T at nu = 0, then above Zhai's limit."""
    t = 16
    self.assertGreater(float(diagnostics.eq9_entropy(0.0, t)),
                       np.log(t))
    nu = jnp.array([0.5, 1.0, 2.0, 4.0])
    gap = (diagnostics.eq9_entropy(nu, t)
           - entropy_bounds.zhai_large_t_limit(nu, t))
    expected = nu * (jnp.exp(-nu / 2) - jnp.exp(-nu)) / (1 / t + jnp.exp(-nu))
    np.testing.assert_allclose(gap, expected, rtol=1e-5)
    np.testing.assert_allclose(
        entropy_bounds.zhai_large_t_limit(nu, 10_000),
        entropy_bounds.zhai_entropy_lower_bound(nu, 10_000), rtol=1e-3)


class ExperimentSmokeTest(absltest.TestCase):

  def test_rank_collapse_smoke(self):
    config = testutil.get_config("rank_collapse", "smoke")
    config.architectures = ("san", "san_skip")   # the others: san_test
    config.methods = ("mean",)        # svd/composite: diagnostics_test
    with tempfile.TemporaryDirectory() as workdir:
      out = rank_collapse.run(config, workdir)
      names = {p.name for p in out["paths"]}
    self.assertContainsSubset({"fig_rank_collapse.png", "fig_paths.png",
                               "collapse_fits.csv", "config.json"}, names)
    self.assertContainsSubset({"order", "order_seed_mean", "order_seed_std",
                               "order_pairs", "order_intercept"},
                              out["collapse_fits"][0])
    self.assertNotIn("kappa", out["collapse_fits"][0])
    # temperature None is lambda = sqrt(head_dim), given explicitly.
    config.temperature = float(np.sqrt(config.head_dim))
    explicit = rank_collapse.run_measure(config)
    np.testing.assert_array_equal(explicit["rel/san/mean"],
                                  out["raw"]["rel/san/mean"])
    # the cubic bound from the table's numbers: each step's bound is its
    # contraction times the previous layer's residual, and `holds` is
    # residual <= bound (or the residual at the float floor)
    rows = out["cubic_bound"]
    self.assertNotEmpty(rows)
    for prev, row in zip(rows, rows[1:]):
      if row["layer"] > 1:
        self.assertEqual((prev["seed"], prev["sequence"], prev["layer"]),
                         (row["seed"], row["sequence"], row["layer"] - 1))
        np.testing.assert_allclose(
            row["one_step_bound"], row["contraction"] * prev["residual"],
            rtol=1e-5, err_msg=str(row))
    for row in rows:
      holds = (row["residual"] <= row["one_step_bound"] * (1 + 1e-9)
               or row["at_float_floor"])
      self.assertEqual(row["holds"], holds, row)
      self.assertTrue(holds, row)
    self.assertTrue(any(r["residual"] <= r["one_step_bound"]
                        and not r["at_float_floor"] for r in rows))
    np.testing.assert_allclose(sum(r["path_fraction"]
                                   for r in out["path_lengths"]), 1.0)

  @testutil.slow("the experiment's smoke run")
  def test_spectrum_collapse_smoke(self):
    config = testutil.get_config("spectrum_collapse", "smoke")
    stds = config.eigen_stds
    with tempfile.TemporaryDirectory() as workdir:
      out = spectrum_collapse.run(config, workdir)
      names = {p.name for p in out["paths"]}
    self.assertContainsSubset({"fig_spectrum_collapse.png",
                               "spectrum_claims.csv"}, names)
    self.assertLen(out["grid"], 4)
    self.assertEqual(sorted({r["eigen_std"] for r in out["grid"]}),
                     sorted(stds))
    self.assertEqual(max(r["zhai_violation_all"] for r in out["grid"]), 0.0)

  @testutil.slow("the experiment's smoke run")
  def test_entropy_check_smoke(self):
    config = testutil.get_config("entropy_check", "smoke")
    with tempfile.TemporaryDirectory() as workdir:
      out = entropy_check.run(config, workdir)
    # the summary's fractions from the per-setting table (equal-sized
    # settings: the mean of their fractions), and no row of any setting
    # below a Zhai bound: its least slack >= -measures.BOUND_TOL
    zhai = [r for r in out["summary"] if r["bound"].startswith("zhai")]
    self.assertTrue(zhai)
    for row in zhai:
      per_setting = [s for s in out["settings"] if s["inputs"] == row["inputs"]]
      np.testing.assert_allclose(
          row["rows_below_fraction"],
          np.mean([s[f"rows_below_{row['bound']}"] for s in per_setting]),
          atol=1e-7, err_msg=str(row))
      for s in per_setting:
        self.assertGreaterEqual(s[f"min_slack_{row['bound']}"],
                                -measures.BOUND_TOL, (row["bound"], s))
      self.assertEqual(row["rows_below_fraction"], 0.0, row)
    self.assertContainsSubset({"eigen_mean", "eigen_std"}, out["settings"][0])
    # temperature None is lambda = sqrt(d), given explicitly.
    config.temperature = float(np.sqrt(config.dim))
    explicit = entropy_check.sweep_from_config(config)
    for kind in config.inputs:
      for name in ("nu", "entropy_mean", "below_eq9", "below_zhai"):
        np.testing.assert_array_equal(explicit[kind][name],
                                      out["raw"][kind][name])


if __name__ == "__main__":
  absltest.main()
