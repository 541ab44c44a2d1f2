"""Tests for qkspec.theory.grid_estimator: the crossed design, calibrated."""
# pylint: disable=invalid-name
import functools
import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import propagation
from qkspec.theory import randomwalk
from qkspec.theory import softmax
from qkspec.theory import grid_bases
from qkspec.theory import grid_estimator
from qkspec.theory import spectrum
from qkspec.experiments import inputs
from qkspec.experiments import simulate_grid
import testutil
import theory_fixtures


# The smoke grid's sizes, so that every test shares its compiled functions.
GRID = testutil.get_config("simulate_grid", "smoke")
K, N, E = GRID.num_draws, GRID.num_sequences, GRID.entropy_sequences
T, DIM = GRID.seq_len, GRID.dim
LAM = math.sqrt(DIM)
MEANS, STDS = theory_fixtures.GRID_MEANS, theory_fixtures.GRID_STDS
_grid_stats = jax.jit(grid_estimator.grid_stats)


def _covariances():
  return inputs.covariances(GRID)        # [I, R^T R / d]


def _bases(key):
  return simulate_grid.sample_bases(
      key, _covariances(), num_draws=K, num_sequences=N, entropy_sequences=E,
      seq_len=T, temperature=LAM)


def _numpy_fresh_rho(covs, means, stds, num_draws, num_walks, seed):
  """The paper's procedure in NumPy: new W_QK and walks per draw, [C, P, T]."""
  rng = np.random.default_rng(seed)
  out = np.zeros((len(covs), len(means), num_draws, T))
  for c, cov in enumerate(covs):
    evals, evecs = np.linalg.eigh(cov)
    root = (evecs * np.sqrt(np.clip(evals, 0, None))) @ evecs.T
    for p, (mean, std) in enumerate(zip(means, stds)):
      q, r = np.linalg.qr(rng.standard_normal((num_draws, DIM, DIM)))
      basis = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
      eig = mean + std * rng.standard_normal((num_draws, 1, DIM))
      w = (basis * eig) @ basis.transpose(0, 2, 1)
      x = np.cumsum(rng.standard_normal((num_draws, num_walks, T, DIM))
                    @ root, axis=2)
      omega = np.einsum("kne,kef,kntf->knt", x[:, :, -1], w, x) / LAM
      u = (omega - omega.mean(-1, keepdims=True)) / T + 1 / T
      out[c, p] = ((u >= 0) & (u <= 1)).mean(1)
  return out


class EstimatorTest(absltest.TestCase):

  def test_row_entropy_equals_attention_entropy(self):
    rng = np.random.default_rng(1)
    logits = jnp.asarray(rng.standard_normal((100, 9))
                         * np.repeat([1.0, 300.0], 50)[:, None], jnp.float32)
    np.testing.assert_allclose(
        grid_estimator.row_entropy(logits),
        diagnostics.attention_entropy(softmax.softmax(logits), reduce=False),
        atol=2e-5)
    np.testing.assert_allclose(grid_estimator.row_entropy(logits.T, axis=0),
                               grid_estimator.row_entropy(logits), rtol=1e-6)

  def test_crossed_standard_error_formula(self):
    f = np.random.default_rng(0).random((5, 30)) < 0.3   # K x N table
    se = grid_estimator.crossed_standard_error(
        jnp.asarray(f.mean(1)), jnp.asarray(np.sum(f.sum(0)**2.0)), 30)
    expected = np.sqrt(f.mean(1).var(ddof=1) / 5 + f.mean(0).var(ddof=1) / 30)
    np.testing.assert_allclose(se, expected, rtol=1e-5)


@functools.cache
def _over_seeds() -> dict[str, np.ndarray]:
  """grid_stats' means and standard errors over 200 seeds, {name: [S, ...]}
  (computed once for the GridStatsTest cases that need it)."""
  names = ("rho_mean", "rho_se", "entropy_mean", "entropy_se")
  per_seed = {name: [] for name in names}
  for seed in range(200):
    stats = _grid_stats(_bases(jax.random.key(1000 + seed)),
                        jnp.asarray(MEANS), jnp.asarray(STDS))
    for name in names:
      per_seed[name].append(np.asarray(stats[name]))
  return {name: np.asarray(v) for name, v in per_seed.items()}


class GridStatsTest(parameterized.TestCase):
  """grid_stats equals the paper's procedure run draw by draw on its walks."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.key = jax.random.key(11)
    cls.covs = _covariances()
    cls.bases = _bases(cls.key)
    cls.stats = _grid_stats(cls.bases, jnp.asarray(MEANS), jnp.asarray(STDS))

  def test_shapes_and_finite(self):
    p, c = len(MEANS), len(self.covs)
    chex.assert_shape(self.stats["rho"], (p, K, c, T))
    chex.assert_shape(self.stats["rho_se"], (p, c, T))
    chex.assert_shape(self.stats["entropy"], (p, K, c))
    chex.assert_tree_all_finite(self.stats)

  def test_equals_direct_computation(self):
    # sample_bases: fold_in(key, 0) gives the spectra, fold_in(key, 1) walks.
    key_spectra = jax.random.fold_in(self.key, 0)

    @jax.jit
    def direct(key_w, x, cov, mean, std):
      """Definition 1 and Eq. (1) with an explicit W_QK = sample_qk(...)."""
      w = spectrum.sample_qk(key_w, DIM, mean, std)
      rho = propagation.empirical_rho(propagation.query_logits(x, w, LAM))
      logits = jnp.einsum("nte,nse->nts", x[:E] @ w, x[:E]) / LAM
      entropy = diagnostics.attention_entropy(softmax.softmax(logits))
      st = spectrum.spectrum_stats(w, cov)
      return rho, entropy, st["trace"], st["trace_sq"]

    basis, _ = grid_bases.draw_spectra(key_spectra, K, DIM)
    s = randomwalk.random_walk(jax.random.fold_in(self.key, 1), N, T, DIM)
    for c, cov in enumerate(self.covs):
      x = s @ randomwalk.covariance_sqrt(cov)
      for k in range(K):
        # Sigma = I: draw k sees the rotated walks x B_k^T (module doc).
        x_k = x @ basis[k].T if c == 0 else x
        for p, (mean, std) in enumerate(zip(MEANS, STDS)):
          rho, entropy, trace, trace_sq = direct(
              jax.random.fold_in(key_spectra, k), x_k, cov, mean, std)
          # Same walks and W: only round-off may flip one walk's event.
          np.testing.assert_allclose(self.stats["rho"][p, k, c], rho,
                                     atol=1.0 / N + 1e-6)
          np.testing.assert_allclose(self.stats["entropy"][p, k, c], entropy,
                                     rtol=1e-4, atol=1e-5)
          np.testing.assert_allclose(self.stats["trace"][p, k, c], trace,
                                     rtol=1e-4, atol=1e-4)
          np.testing.assert_allclose(self.stats["trace_sq"][p, k, c],
                                     trace_sq, rtol=1e-4)

  def test_chunks_equal_whole(self):
    half = jax.jit(grid_estimator.grid_stats)(
        self.bases, jnp.asarray(MEANS[2:]), jnp.asarray(STDS[2:]))
    for name in ("rho", "rho_se", "entropy", "entropy_se"):
      np.testing.assert_allclose(half[name], self.stats[name][2:], atol=1e-6)

  def test_shared_design_matches_fresh_design(self):
    """Mean over seeds of the shared estimate == the paper's rho (MC error)."""
    rho_S = np.moveaxis(_over_seeds()["rho_mean"], 2, 1)   # [S, P, C, T]
    seeds = rho_S.shape[0]
    rho_F = _numpy_fresh_rho(np.asarray(self.covs), MEANS, STDS,
                             num_draws=1_000, num_walks=16, seed=0)
    err_S = rho_S.std(0, ddof=1) / math.sqrt(seeds)
    err_F = rho_F.std(2, ddof=1) / math.sqrt(rho_F.shape[2])
    z = np.abs(rho_S.mean(0) - rho_F.mean(2)) / np.sqrt(
        err_S**2 + err_F**2 + 1e-12)
    self.assertLess(z.max(), 4.5, f"z-scores {z}")

  @parameterized.named_parameters(("rho", "rho", 0.02, 10),
                                  ("entropy", "entropy", 1e-3, 8))
  def test_standard_errors_match_the_spread_over_seeds(
      self, name, informative_se, min_informative):
    """The crossed-design SE is calibrated: its mean over 200 seeds matches
    the spread of the estimates over those seeds (slightly conservative by
    construction, ~0.95); an SE off by 2x gives a ratio of 0.5 or 2."""
    estimates = _over_seeds()[f"{name}_mean"]
    se = _over_seeds()[f"{name}_se"].mean(0)
    ratio = estimates.std(0, ddof=1) / se
    informative = se > informative_se
    self.assertGreaterEqual(int(informative.sum()), min_informative)
    self.assertBetween(float(np.median(ratio[informative])), 0.75, 1.15)


if __name__ == "__main__":
  absltest.main()
