"""Tests for qkspec.theory.diagnostics: entropy (Zhai), rank collapse (Dong)."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

from qkspec.theory import diagnostics as dg



def _composite_min_lp(x, num_s=120):
  """min_c sqrt(||X - 1c^T||_1 ||X - 1c^T||_inf) by linear programming.

  sqrt(ab) = min_s (s a + b / s) / 2, and for fixed s the inner problem in
  (c, a, b, |R|) is an LP; minimise over a grid of s, then refine.
  """
  t, d = x.shape
  n = d + 2 + t * d                       # c, a, b, p (p_tj >= |x_tj - c_j|)

  def solve(s):
    cost = np.zeros(n)
    cost[d], cost[d + 1] = s, 1 / s
    rows, rhs = [], []
    for ti in range(t):
      for j in range(d):
        p = d + 2 + ti * d + j
        r1 = np.zeros(n)
        r1[p], r1[j] = -1, -1
        rows.append(r1)
        rhs.append(-x[ti, j])                    # x - c <= p
        r2 = np.zeros(n)
        r2[p], r2[j] = -1, 1
        rows.append(r2)
        rhs.append(x[ti, j])                     # c - x <= p
    for j in range(d):                           # column sums <= a
      r = np.zeros(n)
      r[d] = -1
      r[[d + 2 + ti * d + j for ti in range(t)]] = 1
      rows.append(r)
      rhs.append(0.0)
    for ti in range(t):                          # row sums <= b
      r = np.zeros(n)
      r[d + 1] = -1
      r[d + 2 + ti * d: d + 2 + (ti + 1) * d] = 1
      rows.append(r)
      rhs.append(0.0)
    res = optimize.linprog(cost, A_ub=np.array(rows), b_ub=np.array(rhs),
                           bounds=[(None, None)] * d + [(0, None)] * (n - d))
    return res.fun / 2

  grid = np.geomspace(1e-2, 1e2, num_s)
  vals = [solve(s) for s in grid]
  best = grid[int(np.argmin(vals))]
  fine = optimize.minimize_scalar(solve, bounds=(best / 1.2, best * 1.2),
                                  method="bounded")
  return min(min(vals), fine.fun)


class EntropyTest(parameterized.TestCase):

  def test_uniform_causal_rows_give_log_of_visible_keys(self):
    t = 7
    mask = np.tril(np.ones((t, t), bool))
    probs = mask / mask.sum(-1, keepdims=True)
    per_row = dg.attention_entropy(jnp.asarray(probs), jnp.asarray(mask),
                                   reduce=False)
    np.testing.assert_allclose(per_row, np.log(np.arange(1, t + 1)),
                               atol=1e-6)
    self.assertAlmostEqual(float(dg.attention_entropy(probs, mask)),
                           np.log(np.arange(1, t + 1)).mean(), places=5)

  def test_one_hot_rows_give_zero(self):
    probs = jax.nn.one_hot(jnp.array([2, 0, 4]), 5)
    np.testing.assert_allclose(dg.attention_entropy(probs, reduce=False), 0.0)

  def test_masked_positions_change_nothing(self):
    key1, key2 = jax.random.split(jax.random.key(0))
    t = 6
    mask = jnp.tril(jnp.ones((t, t), bool))
    logits = jax.random.normal(key1, (2, t, t))
    probs = jax.nn.softmax(jnp.where(mask, logits, -jnp.inf), axis=-1)
    garbage = jnp.where(mask, probs, jax.random.uniform(key2, probs.shape))
    np.testing.assert_allclose(dg.attention_entropy(garbage, mask),
                               dg.attention_entropy(probs, mask), rtol=1e-6)
    # A padded query (no visible key) is left out of the mean.
    qmask = mask.at[-1].set(False)
    kept = dg.attention_entropy(probs[:, :-1], mask[:-1])
    self.assertAlmostEqual(float(dg.attention_entropy(garbage, qmask)),
                           float(kept), places=5)

  def test_against_loop(self):
    probs = jax.nn.softmax(jax.random.normal(jax.random.key(1), (3, 4, 5)))
    expect = np.mean([-np.sum(p * np.log(p)) for p in
                      np.asarray(probs).reshape(-1, 5)])
    self.assertAlmostEqual(float(dg.attention_entropy(probs)), expect,
                           places=5)

  def test_probabilities_are_checked(self):
    with self.assertRaisesRegex(ValueError, "probs must be non-negative"):
      dg.attention_entropy(jnp.array([[1.2, -0.2]]))
    with self.assertRaisesRegex(ValueError, "probs rows must sum to 1"):
      dg.attention_entropy(jnp.array([[0.5, 0.2]]))
    # With a mask the rows are checked over the visible keys only: a row
    # normalised over all keys but not over the visible ones is rejected.
    mask = jnp.array([[True, False]])
    with self.assertRaisesRegex(ValueError, "probs rows must sum to 1"):
      dg.attention_entropy(jnp.array([[0.5, 0.5]]), mask)
    self.assertAlmostEqual(float(dg.attention_entropy(
        jnp.array([[1.0, -3.0]]), mask)), 0.0)
    # Round-off within the 1e-3 tolerance passes; under jit nothing is
    # inspected (the caller is responsible).
    self.assertGreater(float(dg.attention_entropy(
        jnp.array([[0.5, 0.5004]]))), 0.69)
    self.assertTrue(np.isfinite(float(jax.jit(dg.attention_entropy)(
        jnp.array([[0.5, 0.2]])))))


class Eq9Test(absltest.TestCase):
  """Eq. (9) as printed, against values computed without its formula."""

  def test_nu_zero_is_log_one_plus_t(self):
    for t in (1, 16, 64, 1000):
      self.assertAlmostEqual(float(dg.eq9_entropy(0.0, t)), np.log1p(t),
                             places=5)

  def test_value_at_one_point(self):
    # ln(1 + 64/e) + e^(-1/2) / (1/64 + 1/e), worked out once in float64.
    self.assertAlmostEqual(float(dg.eq9_entropy(1.0, 64)), 4.782026947825798,
                           places=5)

  def test_large_nu_limit(self):
    # nu -> inf: ln(1 + T e^-nu) ~ T e^-nu is negligible and the second term
    # tends to T nu e^(-nu/2).
    t = 64
    for nu in (40.0, 60.0):
      self.assertAlmostEqual(
          float(dg.eq9_entropy(nu, t)) / (t * nu * np.exp(-nu / 2)), 1.0,
          places=5)
    self.assertLess(float(dg.eq9_entropy(200.0, t)), 1e-10)

  def test_exceeds_max_entropy_below_nu_star(self):
    """README errata: Eq. (9) > ln T on [0, nu*], so it bounds nothing there.

    nu* = 7.5, 10.1, 12.8, 15.5 for T = 16, 64, 256, 1024, peak up to 17 ln T.
    """
    for t, nu_star in ((16, 7.5), (64, 10.1), (256, 12.8), (1024, 15.5)):
      below = np.linspace(0.0, nu_star - 0.05, 500)
      values = np.asarray(dg.eq9_entropy(below, t))
      self.assertTrue(np.all(values > np.log(t)), t)
      self.assertLess(float(dg.eq9_entropy(nu_star + 0.05, t)), np.log(t))
    peak = float(np.max(np.asarray(dg.eq9_entropy(below, 1024))))
    self.assertBetween(peak / np.log(1024), 16.0, 17.0)

  def test_bad_nu(self):
    with self.assertRaisesRegex(ValueError, "nu must be non-negative"):
      dg.eq9_entropy(-1.0, 64)


class RankCollapseTest(parameterized.TestCase):

  def test_composite_norm(self):
    x = np.asarray(jax.random.normal(jax.random.key(2), (2, 5, 3)))
    for b in range(2):
      expect = np.sqrt(np.linalg.norm(x[b], 1) * np.linalg.norm(x[b], np.inf))
      self.assertAlmostEqual(float(dg.composite_norm(x)[b]), expect, places=4)

  @parameterized.parameters(*dg.RESIDUAL_METHODS)
  def test_rank_one_rows_have_zero_residual(self, method):
    row = jax.random.normal(jax.random.key(3), (4,))
    x = jnp.ones((6, 1)) * row[None, :]
    self.assertLess(float(dg.rank_collapse_residual(x, method)), 1e-5)

  @parameterized.parameters("mean", "composite")
  def test_invariant_to_adding_one_c(self, method):
    k1, k2 = jax.random.split(jax.random.key(4))
    x = jax.random.normal(k1, (3, 7, 4))
    c = 5 * jax.random.normal(k2, (4,))
    np.testing.assert_allclose(
        dg.rank_collapse_residual(x + c[None, None, :], method),
        dg.rank_collapse_residual(x, method), rtol=2e-4)

  def test_svd_residual(self):
    x = np.asarray(jax.random.normal(jax.random.key(5), (6, 4)))
    sigma = np.linalg.svd(x, compute_uv=False)
    self.assertAlmostEqual(float(dg.rank_collapse_residual(x, "svd")),
                           np.sqrt((sigma[1:]**2).sum()), places=4)

  def test_mean_residual(self):
    x = np.asarray(jax.random.normal(jax.random.key(6), (6, 4)))
    self.assertAlmostEqual(float(dg.rank_collapse_residual(x, "mean")),
                           np.linalg.norm(x - x.mean(0)), places=4)
    rel = dg.relative_residual(jnp.asarray(x) + 3.0, "mean")
    self.assertAlmostEqual(float(rel), np.linalg.norm(x - x.mean(0))
                           / np.linalg.norm(x + 3.0), places=4)

  @parameterized.parameters(0, 1, 2)
  def test_composite_against_linear_programming(self, seed):
    x = np.array(jax.random.normal(jax.random.key(10 + seed), (5, 3)))
    x[:, 0] *= 4                                  # unequal column scales
    got = float(dg.rank_collapse_residual(jnp.asarray(x), "composite"))
    best = _composite_min_lp(x.astype(np.float64))
    self.assertGreaterEqual(got, best * (1 - 1e-4))
    self.assertLessEqual(got, best * 1.01)
    median = float(dg.composite_norm(x - np.median(x, 0)))
    self.assertLessEqual(got, median)

  def test_a_mask_leaves_out_the_padded_rows(self):
    x = np.asarray(jax.random.normal(jax.random.key(7), (2, 6, 4)))
    tokens = np.arange(6)[None, :] < np.array([[6], [3]])
    got = jax.jit(lambda x, m: dg.relative_residual(x, mask=m))(
        x * 1e3 * ~tokens[..., None] + x, tokens)
    for b, n in enumerate((6, 3)):
      rows = x[b, :n]
      self.assertAlmostEqual(float(got[b]), np.linalg.norm(
          rows - rows.mean(0)) / np.linalg.norm(rows), places=5)
    with self.assertRaisesRegex(ValueError, "method='mean' only"):
      dg.relative_residual(x, "svd", mask=tokens)

  def test_bad_method(self):
    with self.assertRaisesRegex(ValueError, "method"):
      dg.rank_collapse_residual(jnp.ones((3, 2)), "max")
    with self.assertRaisesRegex(ValueError, r"\[..., T, d\]"):
      dg.relative_residual(jnp.ones((3,)))


class RelativeResidualTest(parameterized.TestCase):

  @parameterized.parameters(*dg.RESIDUAL_METHODS)
  def test_relative_residual_invariances(self, method):
    x = jax.random.normal(jax.random.key(0), (6, 5))
    r = dg.relative_residual(x, method, num_steps=100)
    np.testing.assert_allclose(
        dg.relative_residual(3.7 * x, method, num_steps=100), r,
        rtol=1e-4)
    perm = np.array([2, 0, 5, 1, 3, 4])
    np.testing.assert_allclose(
        dg.relative_residual(x[perm], method, num_steps=100), r,
        rtol=1e-3)
    if method != "svd":   # res(X) ignores 1 c^T (svd does not, documented)
      c = jax.random.normal(jax.random.key(1), (1, 5))
      np.testing.assert_allclose(
          dg.rank_collapse_residual(x + c, method, num_steps=100),
          dg.rank_collapse_residual(x, method, num_steps=100),
          rtol=2e-3)


if __name__ == "__main__":
  absltest.main()
