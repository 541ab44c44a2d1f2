"""Tests for qkspec.theory.spectrum (Eqs. 5-8, Fig. 5 sampler)."""
from absl.testing import absltest
from absl.testing import parameterized
import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import locater
from qkspec.theory import randomwalk
from qkspec.theory import spectrum



class SpectrumTest(chex.TestCase, parameterized.TestCase):

  def test_haar_orthogonal(self):
    d = 6
    bs = jax.vmap(lambda k: spectrum.haar_orthogonal(k, d))(
        jax.random.split(jax.random.key(0), 4000))
    eye = jnp.broadcast_to(jnp.eye(d), bs.shape)
    np.testing.assert_allclose(jnp.swapaxes(bs, -1, -2) @ bs, eye, atol=1e-5)
    # Haar: every entry has mean 0 and E B_ij^2 = 1/d, E B_ij^4 = 3/(d(d+2)).
    b = np.asarray(bs, np.float64)
    se2 = np.sqrt((3 / (d * (d + 2)) - 1 / d**2) / b.shape[0])
    self.assertLess(np.abs((b**2).mean(0) - 1 / d).max(), 5 * se2)
    self.assertLess(np.abs(b.mean(0)).max(), 5 * np.sqrt(1 / d / b.shape[0]))
    np.testing.assert_allclose((b**4).mean(), 3 / (d * (d + 2)), rtol=0.05)

  def test_sample_qk_eigenvalues(self):
    d, mean, scale = 128, 0.3, 0.05
    w = spectrum.sample_qk(jax.random.key(1), d, mean, scale)
    np.testing.assert_allclose(w, w.T, atol=1e-6)
    evals = np.linalg.eigvalsh(np.asarray(w, np.float64))
    self.assertAlmostEqual(evals.mean(), mean, delta=5 * scale / np.sqrt(d))
    self.assertAlmostEqual(evals.std(), scale, delta=0.2 * scale)
    # scale = 0: every eigenvalue equals the mean.
    np.testing.assert_allclose(
        spectrum.sample_qk(jax.random.key(2), 8, 0.7, 0.0), 0.7 * np.eye(8),
        atol=1e-5)

  def test_sample_qk_vmaps_over_mean_and_scale(self):
    f = jax.jit(jax.vmap(lambda m, s: spectrum.sample_qk(
        jax.random.key(3), 4, m, s)))
    out = f(jnp.array([0.0, 1.0]), jnp.array([0.0, 0.0]))
    np.testing.assert_allclose(out[1], np.eye(4), atol=1e-5)

  @parameterized.parameters(None, "aniso")
  def test_stats_against_eigenvalues(self, cov_kind):
    d = 12
    k1, k2 = jax.random.split(jax.random.key(4))
    w_qk = jax.random.normal(k1, (d, d)) * 0.3 + 0.1 * jnp.eye(d)  # asymmetric
    cov = None if cov_kind is None else randomwalk.anisotropic_covariance(k2, d)
    lam = 2.5
    stats = spectrum.spectrum_stats(w_qk, cov, lam)
    sym = 0.5 * (np.asarray(w_qk) + np.asarray(w_qk).T)
    big_w = sym if cov is None else sym @ np.asarray(cov)
    w = np.linalg.eigvals(big_w.astype(np.float64))
    self.assertLess(np.abs(w.imag).max(), 1e-6)   # similar to a symmetric one
    w = w.real
    expect = dict(trace=w.sum(), trace_sq=(w**2).sum(),
                  xi=w.sum() / np.sqrt((w**2).sum()),
                  eta=np.sqrt((w**2).sum()) / lam, r=w.sum() / lam,
                  variance=d**2 * w.var(),                       # Eq. (8)
                  scale=(np.asarray(w_qk)**2).sum(),
                  qk_trace=np.trace(np.asarray(w_qk)),
                  norm_2=np.linalg.norm(np.asarray(w_qk), 2),
                  norm_fro=np.linalg.norm(np.asarray(w_qk), "fro"),
                  norm_1=np.linalg.norm(np.asarray(w_qk), 1),
                  norm_l1=np.abs(np.asarray(w_qk)).sum())
    for name, value in expect.items():
      np.testing.assert_allclose(stats[name], value, rtol=2e-4, atol=1e-4,
                                 err_msg=name)

  def test_default_temperature_and_batching(self):
    ws = jax.random.normal(jax.random.key(5), (3, 2, 8, 8))
    batched = spectrum.spectrum_stats(ws)
    single = spectrum.spectrum_stats(ws[1, 0], temperature=np.sqrt(8))
    for name in single:
      np.testing.assert_allclose(batched[name][1, 0], single[name], rtol=1e-5,
                                 err_msg=name)

  def test_eq5_and_corrected_eq7_bounds(self):
    d = 10

    @jax.jit
    def draw(k):
      k1, k2 = jax.random.split(k)
      w_qk = spectrum.sample_qk(k1, d, jax.random.normal(k2), 0.5)
      cov = randomwalk.anisotropic_covariance(k2, d)
      return cov, spectrum.spectrum_stats(w_qk, cov)

    for k in jax.random.split(jax.random.key(6), 50):
      cov, s = draw(k)
      bound = np.sqrt(d * s["trace_sq"])
      self.assertLessEqual(abs(float(s["trace"])), bound * (1 + 1e-5))  # (5)
      cov_2 = np.linalg.norm(np.asarray(cov), 2)
      lhs = abs(float(s["trace"])) / (np.sqrt(d) * cov_2)
      self.assertLessEqual(lhs, float(s["norm_fro"]) * (1 + 1e-5))
      self.assertLessEqual(float(s["norm_fro"]), float(s["norm_l1"]))
    # The chain as printed fails: W_QK = Sigma = I.
    s = spectrum.spectrum_stats(jnp.eye(d), jnp.eye(d))
    self.assertGreater(float(s["trace"]) / np.sqrt(d), float(s["norm_2"]))
    self.assertGreater(float(s["norm_fro"]), float(s["norm_1"]))

  def test_array_likes_and_zero_matrix(self):
    # Python lists are accepted at the boundary.
    lists = spectrum.spectrum_stats([[1.0, 0.0], [0.0, 2.0]],
                                    [[1.0, 0.0], [0.0, 1.0]], 1.0)
    self.assertAlmostEqual(float(lists["trace"]), 3.0, places=6)
    self.assertAlmostEqual(float(lists["xi"]), 3.0 / np.sqrt(5.0), places=6)
    # W_QK = 0: tr(W^2) = 0 and xi is defined as 0 (not 0/0 = nan).
    zero = spectrum.spectrum_stats(jnp.zeros((4, 4)))
    self.assertEqual(float(zero["xi"]), 0.0)
    chex.assert_tree_all_finite(zero)
    # The safe denominator keeps the gradient of xi exact where W != 0.
    w = jnp.asarray([[1.0, 0.5], [0.5, -2.0]])
    grad = jax.grad(lambda m: spectrum.spectrum_stats(m)["xi"])(w)
    t, q = np.trace(np.asarray(w)), np.sum(np.asarray(w)**2)
    expect = np.eye(2) / np.sqrt(q) - t * np.asarray(w) / q**1.5
    np.testing.assert_allclose(grad, expect, rtol=1e-5, atol=1e-6)

  def test_scale_floor_is_tight_only_for_multiples_of_identity(self):
    d = 7
    w = jax.random.normal(jax.random.key(3), (50, d, d))
    stats = spectrum.spectrum_stats(w)
    floor = spectrum.scale_floor(stats["qk_trace"], d)
    self.assertTrue(bool(jnp.all(stats["scale"] >= floor)))
    self.assertGreater(float(jnp.min(stats["scale"] / floor)), 1.0)
    iso = spectrum.spectrum_stats(-0.3 * jnp.eye(d))
    self.assertAlmostEqual(float(spectrum.scale_floor(iso["qk_trace"], d)),
                           float(iso["scale"]), places=6)
    # Same trace, unequal diagonal: strictly above the floor.
    diag = spectrum.spectrum_stats(jnp.diag(jnp.arange(d, dtype=float)))
    self.assertGreater(float(diag["scale"]),
                       float(spectrum.scale_floor(diag["qk_trace"], d)) + 1.0)

  def test_bad_arguments(self):
    with self.assertRaisesRegex(ValueError, "square"):
      spectrum.spectrum_stats(jnp.ones((3, 4)))
    with self.assertRaisesRegex(ValueError, "cov must be 3 x 3"):
      spectrum.spectrum_stats(jnp.eye(3), jnp.eye(4))
    with self.assertRaisesRegex(ValueError, "eigen_std must be non-negative"):
      spectrum.sample_qk(jax.random.key(0), 4, 0.0, -1.0)
    with self.assertRaisesRegex(ValueError, "temperature"):
      spectrum.spectrum_stats(jnp.eye(3), temperature=-1.0)


class QkFromKernelsTest(absltest.TestCase):
  """W_QK from Flax kernels."""

  def test_accepts_nested_lists(self):
    wq = [[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]          # [d=3, D=2]
    wk = [[0.0, 1.0], [1.0, 0.0], [2.0, 0.0]]
    np.testing.assert_allclose(spectrum.qk_from_kernels(wq, wk),
                               np.asarray(wq) @ np.asarray(wk).T)

  def test_matches_flax_dense_logits(self):
    d_in, dh = 6, 4
    x = jax.random.normal(jax.random.key(1), (5, d_in))
    dense = nn.Dense(dh, use_bias=False)
    pq = dense.init(jax.random.key(2), x)
    pk = dense.init(jax.random.key(3), x)
    logits = dense.apply(pq, x) @ dense.apply(pk, x).T
    w_qk = spectrum.qk_from_kernels(pq["params"]["kernel"],
                                     pk["params"]["kernel"])
    np.testing.assert_allclose(logits, x @ w_qk @ x.T, rtol=1e-4, atol=1e-4)

  def test_per_head(self):
    d_in, h = 6, 3
    kq = jax.random.normal(jax.random.key(4), (d_in, h, 2))
    kk = jax.random.normal(jax.random.key(5), (d_in, h, 2))
    out = spectrum.qk_from_kernels(kq, kk)
    self.assertEqual(out.shape, (h, d_in, d_in))
    for i in range(h):
      np.testing.assert_allclose(
          out[i], spectrum.qk_from_kernels(kq[:, i], kk[:, i]), rtol=1e-5,
          atol=1e-5)
    self.assertEqual(locater.locater_penalty(out, 1.0, 1.0).shape, (h,))

  def test_paper_orientation(self):
    # W_Q, W_K in R^{D x d} (paper): the kernels are their transposes.
    kq, kk = jax.random.split(jax.random.key(0))
    wq = jax.random.normal(kq, (4, 6))
    wk = jax.random.normal(kk, (4, 6))
    np.testing.assert_allclose(spectrum.qk_from_kernels(wq.T, wk.T),
                               wq.T @ wk, rtol=1e-5, atol=1e-5)

  def test_grouped_query_heads_read_key_head_h_over_group(self):
    # N = 6 query heads, K = 2 key heads: heads 0-2 read key 0, 3-5 key 1.
    kq = np.asarray(jax.random.normal(jax.random.key(4), (5, 6, 3)))
    kk = np.asarray(jax.random.normal(jax.random.key(5), (5, 2, 3)))
    out = spectrum.qk_from_kernels(kq, kk)
    np.testing.assert_allclose(out, [kq[:, h] @ kk[:, h // 3].T
                                     for h in range(6)], rtol=1e-5, atol=1e-5)

  def test_bad_arguments(self):
    for q, k in (((3, 2), (3, 4)), ((3, 4, 2), (3, 3, 2)),
                 ((3, 4, 2), (3, 2, 3)), ((3, 4, 2), (3, 2))):
      with self.assertRaisesRegex(ValueError, r"\[d, K, D\]", msg=str(q)):
        spectrum.qk_from_kernels(jnp.ones(q), jnp.ones(k))
    with self.assertRaisesRegex(ValueError, r"\[d, D\] or \[d, H, D\]"):
      spectrum.qk_from_kernels(jnp.ones((3,)), jnp.ones((3,)))


class KernelStatsTest(parameterized.TestCase):
  """The statistics from [D, D] products equal those of the d x d W_QK."""

  @parameterized.named_parameters(("one_head", None, None), ("gqa", 4, 2))
  def test_equal_the_dense_statistics(self, N, K):
    d, D = 7, 3
    kq, kk = jax.random.split(jax.random.key(6))
    wq = np.asarray(jax.random.normal(kq, (d, D) if N is None else (d, N, D)),
                    np.float64)
    wk = np.asarray(jax.random.normal(kk, (d, D) if K is None else (d, K, D)),
                    np.float64)
    heads = [(wq, wk)] if N is None else [(wq[:, h], wk[:, h // (N // K)])
                                          for h in range(N)]
    w = np.stack([q @ k.T for q, k in heads])             # NumPy, dense
    sym = (w + np.swapaxes(w, -1, -2)) / 2
    want = dict(trace=np.trace(w, axis1=1, axis2=2),
                trace_sq=np.einsum("hij,hji->h", sym, sym),
                scale=np.sum(w**2, axis=(1, 2)))
    want.update(xi=want["trace"] / np.sqrt(want["trace_sq"]),
                eta=np.sqrt(want["trace_sq"]) / 2.0, r=want["trace"] / 2.0)
    got = jax.jit(spectrum.kernel_spectrum_stats)(wq.astype(np.float32),
                                                  wk.astype(np.float32), 2.0)
    self.assertEqual(sorted(got), sorted(want))
    for name, value in want.items():
      np.testing.assert_allclose(np.reshape(got[name], -1), value, rtol=1e-5,
                                 err_msg=name)

  def test_no_d_by_d_array_is_traced(self):
    # Every intermediate of the statistics and of the penalty's gradient
    # is at most [D, D] per head: none has two axes of width d.
    d, N, K, D = 64, 4, 2, 8
    q = jax.ShapeDtypeStruct((d, N, D), jnp.bfloat16)
    k = jax.ShapeDtypeStruct((d, K, D), jnp.bfloat16)
    grad = jax.grad(lambda q, k: jnp.sum(locater.kernel_locater_penalty(
        q.astype(jnp.float32), k.astype(jnp.float32), 0.3, 0.7)))
    for fn in (spectrum.kernel_spectrum_stats, grad):
      shapes = [v.aval.shape for e in jax.make_jaxpr(fn)(q, k).eqns
                for v in e.outvars]
      self.assertNotIn(2, [s.count(d) for s in shapes], shapes)
    dense = jax.make_jaxpr(spectrum.qk_from_kernels)(q, k)
    self.assertIn((N, d, d), [v.aval.shape for v in dense.jaxpr.outvars])


if __name__ == "__main__":
  absltest.main()
