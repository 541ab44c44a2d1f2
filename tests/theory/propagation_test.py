"""Tests for qkspec.theory.propagation.

Definition 1, Lemma 1 (and its erratum), Eq. 6, Lemma 2.
"""
import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import propagation as prop
from qkspec.theory import randomwalk
from qkspec.theory import softmax
from qkspec.theory import spectrum
import testutil



def _u_samples(key, w_qk, n, t, cov=None):
  """Monte Carlo samples of u_i [n, T] (float64 on the host)."""
  x = randomwalk.random_walk(key, n, t, w_qk.shape[-1], cov)
  omega = prop.query_logits(x, w_qk)
  return np.asarray(softmax.linearized_score(omega), np.float64)


def _z_moments(samples, mu, v):
  """z-scores of the sample mean and variance against (mu, v)."""
  n = samples.shape[0]
  centred = samples - samples.mean(0)
  m2 = (centred**2).mean(0)
  m4 = (centred**4).mean(0)
  z_mean = (samples.mean(0) - mu) / np.sqrt(m2 / n)
  z_var = (m2 - v) / np.sqrt((m4 - m2**2) / n)
  return np.abs(z_mean).max(), np.abs(z_var).max()


@functools.cache
def _walks_4000x40x128():
  """The random walks `rho_monte_carlo(key(7), ...)` draws, drawn once."""
  return randomwalk.random_walk(jax.random.key(7), 4000, 40, 128)


def _rho_monte_carlo(w_qk):
  """`rho_monte_carlo(key(7), w_qk, num_sequences=4000, seq_len=40)` for a
  [128, 128] W_QK, on walks shared by every regime of RhoTest."""
  return prop.empirical_rho(prop.query_logits(_walks_4000x40x128(), w_qk))


class ExactMomentsTest(parameterized.TestCase):

  @parameterized.named_parameters(("iso_sym", False, True),
                                  ("aniso_sym", True, True),
                                  ("aniso_asym", True, False))
  def test_exact_moments_match_monte_carlo(self, aniso, symmetric):
    d, t, n = 4, 7, 200_000
    k_w, k_c, k_x = jax.random.split(jax.random.key(0), 3)
    w_qk = jax.random.normal(k_w, (d, d)) * 0.8 + 0.6 * jnp.eye(d)
    if symmetric:
      w_qk = spectrum.symmetrize(w_qk)
    cov = randomwalk.anisotropic_covariance(k_c, d) if aniso else None
    mu, v = prop.exact_moments(w_qk, t, cov)
    z_mean, z_var = _z_moments(_u_samples(k_x, w_qk, n, t, cov), mu, v)
    self.assertLess(z_mean, 5.0)
    self.assertLess(z_var, 5.0)

  def test_lemma1_exact_equals_exact_moments_for_symmetric(self):
    d, t = 8, 11
    k1, k2 = jax.random.split(jax.random.key(1))
    w_qk = spectrum.sample_qk(k1, d, 0.2, 0.4)
    cov = randomwalk.anisotropic_covariance(k2, d)
    stats = spectrum.spectrum_stats(w_qk, cov, 2.0)
    mu, v = prop.lemma1_moments(t, stats["trace"], stats["trace_sq"], 2.0,
                                exact=True)
    mu2, v2 = prop.exact_moments(w_qk, t, cov, 2.0)
    np.testing.assert_allclose(mu, mu2, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(v, v2, rtol=1e-4)

  def test_exact_moments_tend_to_corrected_asymptotics(self):
    t = 4000
    mu_e, v_e = prop.lemma1_moments(t, 3.0, 2.0, 1.5, exact=True)
    mu_c, v_c = prop.lemma1_moments(t, 3.0, 2.0, 1.5)
    _, v_p = prop.lemma1_moments(t, 3.0, 2.0, 1.5, variant="paper")
    np.testing.assert_allclose(mu_e, mu_c, atol=2e-3)
    np.testing.assert_allclose(v_e, v_c, rtol=2e-3)
    # The printed variance is 0.29x too large at theta=1/4, 0.077x at 1/2.
    i = np.array([t // 4, t // 2]) - 1
    np.testing.assert_allclose(v_c[i] / v_p[i], [0.2941, 0.0769], rtol=1e-3)

  def test_lemma1_mean_by_hand(self):
    """Lemma 1's mean mu^i = (i/T - 1/2) tr(W)/lambda, W = sym(W_QK) Sigma.

    Both variants print the same mean; tr(W) is worked out by hand.
    """
    w_qk = np.array([[0.8, 0.3, 0.0], [0.3, -0.2, 0.1], [0.0, 0.1, 1.5]])
    sigma = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, -0.3], [0.0, -0.3, 0.5]])
    # tr(W_QK Sigma) = (1.6 + 0.15) + (0.15 - 0.2 - 0.03) + (-0.03 + 0.75).
    tr_w, t, lam = 2.39, 8, 1.7
    theta = np.arange(1, t + 1) / t
    stats = spectrum.spectrum_stats(w_qk, sigma, lam)
    self.assertAlmostEqual(float(stats["trace"]), tr_w, places=5)
    for variant in prop.VARIANTS:
      mu, _ = prop.lemma1_moments(t, stats["trace"], stats["trace_sq"], lam,
                                  variant=variant)
      np.testing.assert_allclose(mu, (theta - 0.5) * tr_w / lam, rtol=1e-5,
                                 atol=1e-6, err_msg=variant)
    # The exact finite-T mean (module doc) is 1/T + (i - (T+1)/2)/T tr/lambda,
    # the asymptotic one shifted by (1 - tr/(2 lambda))/T.
    mu_exact, _ = prop.exact_moments(w_qk, t, sigma, lam)
    np.testing.assert_allclose(
        mu_exact, 1 / t + (theta - 0.5 - 0.5 / t) * tr_w / lam, rtol=1e-5,
        atol=1e-6)

  @testutil.slow("3000 walks of 400 tokens; quick: Monte Carlo meets the "
                 "exact moments (test_exact_moments_match_monte_carlo), "
                 "which tend to the corrected variance, 0.29x and 0.077x "
                 "the printed one (test_exact_moments_tend_to_corrected_"
                 "asymptotics)")
  def test_monte_carlo_variance_at_large_t_refutes_printed_lemma1(self):
    d, t, n = 16, 400, 3000
    w_qk = spectrum.sample_qk(jax.random.key(2), d, 0.05, 0.3)
    stats = spectrum.spectrum_stats(w_qk)
    lam = np.sqrt(d)
    samples = _u_samples(jax.random.key(3), w_qk, n, t)
    i = np.array([t // 4, t // 2]) - 1
    var = samples.var(0)[i]
    _, v_c = prop.lemma1_moments(t, stats["trace"], stats["trace_sq"], lam)
    _, v_p = prop.lemma1_moments(t, stats["trace"], stats["trace_sq"], lam,
                                 variant="paper")
    np.testing.assert_allclose(var / v_c[i], 1.0, atol=0.15)
    np.testing.assert_allclose(var / v_p[i], [0.29, 0.077], rtol=0.2)


class RhoTest(parameterized.TestCase):

  def test_query_logits_against_loop(self):
    x = jax.random.normal(jax.random.key(0), (2, 5, 3))
    w = jax.random.normal(jax.random.key(1), (3, 3))
    out = prop.query_logits(x, w, 2.0)
    xn, wn = np.asarray(x), np.asarray(w)
    for b in range(2):
      for j in range(5):
        self.assertAlmostEqual(float(out[b, j]), xn[b, -1] @ wn @ xn[b, j] / 2,
                               places=4)

  @testutil.slow("4000 walks drawn again through rho_monte_carlo")
  def test_shared_walks_are_those_rho_monte_carlo_draws(self):
    w = spectrum.sample_qk(jax.random.key(6), 128, 0.1, 0.3)
    np.testing.assert_array_equal(
        _rho_monte_carlo(w), prop.rho_monte_carlo(
            jax.random.key(7), w, num_sequences=4000, seq_len=40))

  def test_monte_carlo_matches_manual_estimate(self):
    w = spectrum.sample_qk(jax.random.key(4), 8, 0.3, 0.2)
    rho = prop.rho_monte_carlo(jax.random.key(5), w, num_sequences=500,
                               seq_len=6)
    x = randomwalk.random_walk(jax.random.key(5), 500, 6, 8)
    omega = np.einsum("nd,de,nte->nt", x[:, -1], w, x) / np.sqrt(8)
    u = (omega - omega.mean(1, keepdims=True)) / 6 + 1 / 6
    np.testing.assert_allclose(rho, ((u >= 0) & (u <= 1)).mean(0), atol=1e-6)

  @parameterized.named_parameters(
      ("late_site", 0.1, 0.01), ("middle_site", 0.5, 0.01),
      ("uniform", 0.0, 0.5), ("wide", 0.1, 0.3), ("vanishing", 0.0, 2.0))
  def test_monte_carlo_closer_to_corrected_than_printed(self, mean, scale):
    # Regimes where Lemma 1's o(1) terms are small. Near tr(W) = 0 with a
    # small eta (mean 0, scale 0.2, say) the dropped gamma_0 = 1/T dominates
    # both asymptotic forms; only exact=True is accurate there (next test).
    d, t = 128, 40
    w = spectrum.sample_qk(jax.random.key(6), d, mean, scale)
    mc = _rho_monte_carlo(w)
    err = {}
    for name, kw in dict(paper=dict(variant="paper"), corrected={},
                         exact=dict(exact=True)).items():
      err[name] = float(jnp.abs(
          prop.rho_from_spectrum(w, t, **kw) - mc).mean())
    self.assertLess(err["corrected"], err["paper"])
    self.assertLess(err["exact"], err["paper"])
    self.assertLess(err["exact"], 0.03)

  def test_exact_gaussian_rho_near_uniform_regime(self):
    w = spectrum.sample_qk(jax.random.key(6), 128, 0.0, 0.2)
    mc = _rho_monte_carlo(w)
    exact = prop.rho_from_spectrum(w, 40, exact=True)
    self.assertLess(float(jnp.abs(exact - mc).mean()), 0.02)
    for variant in prop.VARIANTS:
      asym = prop.rho_from_spectrum(w, 40, variant=variant)
      self.assertGreater(float(jnp.abs(asym - mc).mean()), 0.05)

  def test_rho_theta_is_rho_gaussian_in_xi_eta(self):
    t, trace, trace_sq, lam = 50, 7.0, 3.0, 2.0
    xi, eta = trace / np.sqrt(trace_sq), np.sqrt(trace_sq) / lam
    theta = np.arange(1, t + 1) / t
    for variant in prop.VARIANTS:
      np.testing.assert_allclose(
          prop.rho_theta(theta, xi, eta, variant),
          prop.rho_gaussian(t, trace, trace_sq, lam, variant=variant),
          atol=1e-5)

  def test_batched_traces_broadcast(self):
    traces = jnp.array([[1.0, 2.0, 3.0]])
    traces_sq = jnp.array([[1.0, 4.0, 2.0]])
    for kw in (dict(exact=True), {}, dict(variant="paper")):
      batched = prop.rho_gaussian(9, traces, traces_sq, 2.0, **kw)
      self.assertEqual(batched.shape, (1, 3, 9))
      for j in range(3):
        np.testing.assert_allclose(batched[0, j], prop.rho_gaussian(
            9, traces[0, j], traces_sq[0, j], 2.0, **kw), rtol=1e-6)

  def test_rho_from_moments_degenerate_variance(self):
    rho = prop.rho_from_moments(jnp.array([-0.1, 0.5, 1.2]), jnp.zeros(3))
    np.testing.assert_array_equal(rho, [0.0, 1.0, 0.0])

  def test_empirical_rho_axis(self):
    logits = jax.random.normal(jax.random.key(8), (4, 3, 6)) * 20
    np.testing.assert_allclose(
        prop.empirical_rho(jnp.moveaxis(logits, -1, 0), axis=0),
        prop.empirical_rho(logits))
    expect = np.asarray(softmax.propagation_mask(logits)).reshape(-1, 6)
    np.testing.assert_allclose(prop.empirical_rho(logits), expect.mean(0))


  def test_empirical_rho_with_a_mask_against_a_loop(self):
    # Each query sees its own keys (some hidden as -inf): u_i over those,
    # rho_i over the queries that see key i, NaN for a key none sees.
    logits = np.asarray(jax.random.normal(jax.random.key(9), (5, 6))) * 3
    mask = np.array(jax.random.bernoulli(jax.random.key(10), 0.6, (5, 6)))
    mask[:, 0], mask[:, 5] = True, False
    hits, seen = np.zeros(6), np.zeros(6)
    for omega, m in zip(logits, mask):
      keys = np.flatnonzero(m)
      u = (omega[keys] - omega[keys].mean()) / len(keys) + 1 / len(keys)
      hits[keys] += (u >= 0) & (u <= 1)
      seen[keys] += 1
    got = jax.jit(lambda o, m: prop.empirical_rho(o, mask=m))(
        np.where(mask, logits, -np.inf), mask)
    with np.errstate(invalid="ignore"):
      np.testing.assert_allclose(got, hits / seen, rtol=1e-6)
    self.assertTrue(np.isnan(got[5]))


class Lemma2Test(parameterized.TestCase):
  """Every case of Lemma 2, under the printed and the corrected variance."""

  @parameterized.product(variant=prop.VARIANTS,
                         r=[0.5, 2.0, 5.0, -1.0, -2.0, -5.0])
  def test_trace_limits(self, variant, r):
    theta = np.linspace(0, 1, 2001)
    edges = [0.5, 0.5 + 1 / r]
    keep = np.min(np.abs(theta[:, None] - np.array(edges)[None]), 1) > 0.01
    xi = 1e6 * np.sign(r)
    rho = prop.rho_theta(theta, xi, r / xi, variant)
    limit = prop.rho_trace_limit(theta, r)
    np.testing.assert_allclose(rho[keep], limit[keep], atol=1e-4)
    # Lemma 2's window: mass 1/r for |r| > 2, 1/2 otherwise.
    self.assertAlmostEqual(float(limit.mean()), min(0.5, 1 / abs(r)),
                           delta=0.01)

  @parameterized.parameters(*prop.VARIANTS)
  def test_vanishing(self, variant):
    theta = np.linspace(0, 1, 101)
    for xi in (-5.0, 0.0, 5.0):
      self.assertLess(float(prop.rho_theta(theta, xi, 1e7, variant).max()),
                      1e-6)

  @parameterized.parameters(*prop.VARIANTS)
  def test_uniformity(self, variant):
    theta = np.linspace(0.0, 1.0, 401)

    def slope(xi, eta):
      rho = np.asarray(prop.rho_theta(theta, xi, eta, variant), np.float64)
      return np.gradient(rho, theta)

    # The xi-dependent part of rho' vanishes as xi -> 0 ...
    gaps = [np.abs(slope(xi, 1.0) - slope(0.0, 1.0)).max()
            for xi in (1.0, 0.1, 0.01)]
    self.assertLess(gaps[2], 0.02 * gaps[0])
    # ... and rho is flat (1/2 everywhere) when also eta -> 0.
    np.testing.assert_allclose(prop.rho_theta(theta, 0.0, 1e-3, variant), 0.5,
                               atol=1e-6)
    # Erratum: at finite eta the xi = 0 profile still varies with theta
    # (through c(theta)), so |rho'| does not tend to 0 for every eta.
    self.assertGreater(np.abs(slope(0.0, 1.0)).max(), 0.05)


class BadInputTest(absltest.TestCase):

  def test_errors(self):
    w = jnp.eye(3)
    key = jax.random.key(0)
    with self.assertRaisesRegex(ValueError, "seq_len must be >= 2"):
      prop.rho_monte_carlo(key, w, num_sequences=4, seq_len=1)
    with self.assertRaisesRegex(ValueError, "num_sequences must be >= 1"):
      prop.rho_monte_carlo(key, w, num_sequences=0, seq_len=4)
    with self.assertRaisesRegex(ValueError, "square"):
      prop.rho_monte_carlo(key, jnp.ones((3, 2)), num_sequences=4, seq_len=4)
    with self.assertRaisesRegex(ValueError, "seq_len must be >= 2"):
      prop.lemma1_moments(1, 1.0, 1.0, 1.0)
    with self.assertRaisesRegex(ValueError, "variant"):
      prop.rho_gaussian(5, 1.0, 1.0, 1.0, variant="printed")
    with self.assertRaisesRegex(ValueError, "exact=True"):
      prop.lemma1_moments(5, 1.0, 1.0, 1.0, exact=True, variant="paper")
    with self.assertRaisesRegex(ValueError, "temperature"):
      prop.rho_gaussian(5, 1.0, 1.0, -1.0)
    with self.assertRaisesRegex(ValueError, "trace_sq"):
      prop.rho_gaussian(5, 1.0, -1.0, 1.0)
    with self.assertRaisesRegex(ValueError, "eta"):
      prop.rho_theta(0.5, 1.0, 0.0)
    with self.assertRaisesRegex(ValueError, "w_qk must be 3 x 3"):
      prop.query_logits(jnp.ones((5, 3)), jnp.eye(4))

  def test_exact_moments_cov_shape(self):
    with self.assertRaisesRegex(ValueError, "cov must be 3 x 3"):
      prop.exact_moments(jnp.eye(3), 5, jnp.eye(4))
    with self.assertRaisesRegex(ValueError, "w_qk must be one"):
      prop.exact_moments(jnp.ones((2, 3, 3)), 5)
    # Lists are accepted.
    mu, _ = prop.exact_moments([[1.0, 0.0], [0.0, 1.0]], 4, [[1.0, 0.0],
                                                            [0.0, 1.0]], 1.0)
    self.assertEqual(mu.shape, (4,))

  def test_traces_need_a_temperature(self):
    # Traces do not tell d: no sqrt(d) default, a clear error instead.
    for fn in (prop.rho_gaussian, prop.lemma1_moments):
      with self.assertRaisesRegex(ValueError, r"temperature=sqrt\(d\)"):
        fn(5, 1.0, 1.0)
      with self.assertRaisesRegex(ValueError, r"temperature=sqrt\(d\)"):
        fn(5, 1.0, 1.0, None)
    # The positional signature still works.
    np.testing.assert_allclose(
        prop.rho_gaussian(5, 1.0, 2.0, 2.0, True, "corrected"),
        prop.rho_gaussian(5, 1.0, 2.0, temperature=2.0, exact=True))

  def test_theta_outside_unit_interval(self):
    for theta in (-0.1, 1.5, [0.2, 1.01]):
      with self.assertRaisesRegex(ValueError, r"theta must lie in \[0, 1\]"):
        prop.rho_theta(theta, 1.0, 1.0)
    self.assertEqual(prop.rho_theta(np.array([0.0, 1.0]), 1.0, 1.0).shape,
                     (2,))


if __name__ == "__main__":
  absltest.main()
