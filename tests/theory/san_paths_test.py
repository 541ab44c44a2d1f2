"""Tests for qkspec.theory.san_paths: Dong's path decomposition, cubic bound."""
import itertools
import math

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import san_paths
from qkspec.theory import san
from qkspec.experiments import rank_collapse
import theory_fixtures


init_params, forward = theory_fixtures.jitted_san()

L, H, D, T = 3, 2, 8, 6


def _net(arch, seed=0, **kw):
  p = init_params(jax.random.key(seed), num_layers=L, num_heads=H, dim=D,
                      **kw)
  x = san.sample_inputs(jax.random.key(seed + 1), "gaussian", 1, T, D)[0]
  return p, x, forward(p, x, san.ARCHITECTURES[arch])


class PathsTest(parameterized.TestCase):

  def test_pure_san_is_the_sum_of_its_paths(self):
    """X^L = sum over the H^L single-head paths, attention from the full net."""
    with jax.enable_x64(True):
      p, x, out = _net("san")
      y_KxTxd, heads = san_paths.enumerate_paths(x, out["probs"], p["w_v"])
      self.assertEqual(y_KxTxd.shape, (H**L, T, D))
      self.assertEqual(heads.shape, (H**L, L))
      np.testing.assert_allclose(y_KxTxd.sum(0), out["outputs"][-1],
                                 rtol=1e-12, atol=1e-12)
      # One path by hand: P^3_h3 P^2_h2 P^1_h1 X W^1_h1 W^2_h2 W^3_h3.
      k = 5
      h1, h2, h3 = heads[k]
      pr, wv = np.asarray(out["probs"]), np.asarray(p["w_v"])
      manual = (pr[2, h3] @ pr[1, h2] @ pr[0, h1] @ np.asarray(x)
                @ wv[0, h1] @ wv[1, h2] @ wv[2, h3])
      np.testing.assert_allclose(y_KxTxd[k], manual, rtol=1e-12, atol=1e-12)

  def test_skip_san_path_lengths_sum_to_output_and_match_enumeration(self):
    with jax.enable_x64(True):
      p, x, out = _net("san_skip")
      z_KxTxd = san_paths.path_length_components(x, out["probs"], p["w_v"])
      np.testing.assert_allclose(z_KxTxd.sum(0), out["outputs"][-1],
                                 rtol=1e-12, atol=1e-12)
      # Naive: the (H+1)^L paths with head H meaning the skip (P, W) = (I, I).
      pr, wv = np.asarray(out["probs"]), np.asarray(p["w_v"])
      naive = np.zeros((L + 1, T, D))
      for choice in itertools.product(range(H + 1), repeat=L):
        y = np.asarray(x)
        for l, h in enumerate(choice):
          if h < H:
            y = pr[l, h] @ y @ wv[l, h]
        naive[sum(h < H for h in choice)] += y
      np.testing.assert_allclose(z_KxTxd, naive, rtol=1e-10, atol=1e-12)

  @parameterized.parameters((3, 2), (6, 4), (12, 8))
  def test_path_length_fractions(self, num_layers, num_heads):
    frac = san_paths.path_length_fractions(num_layers, num_heads)
    self.assertAlmostEqual(float(frac.sum()), 1.0, places=12)
    if num_layers <= 6:      # count the (H+1)^L paths directly
      counts = np.zeros(num_layers + 1)
      for c in itertools.product(range(num_heads + 1), repeat=num_layers):
        counts[sum(h < num_heads for h in c)] += 1
      np.testing.assert_allclose(frac, counts / counts.sum())
    k = 2
    self.assertAlmostEqual(frac[k], math.comb(num_layers, k) * num_heads**k
                           / (num_heads + 1)**num_layers)

  def test_too_many_paths_raises(self):
    probs = jnp.ones((13, 2, T, T)) / T
    with self.assertRaises(ValueError):
      san_paths.enumerate_paths(jnp.ones((T, D)), probs,
                                jnp.ones((13, 2, D, D)))

  @parameterized.parameters(0, 1, 2, 3)
  def test_cubic_bound_holds_every_layer(self, seed):
    """||res(SA(X))||_F <= c ||res(X)||_F^3 for any weights (see san_paths)."""
    with jax.enable_x64(True):
      p, x, out = _net("san", seed=seed, qk_gain=1.5 + seed, value_gain=2.0)
      lam = float(np.sqrt(D))
      c_L = san_paths.cubic_residual_coefficient(p["w_qk"], p["w_v"], lam)
      res = diagnostics.rank_collapse_residual(out["outputs"], "mean")
      np.testing.assert_array_less(res[1:], c_L * res[:-1]**3 * (1 + 1e-9))

  def test_cubic_coefficient_default_temperature(self):
    k1, k2 = jax.random.split(jax.random.key(0))
    w_qk = jax.random.normal(k1, (2, 3, D, D))
    w_v = jax.random.normal(k2, (2, 3, D, D))
    np.testing.assert_allclose(
        san_paths.cubic_residual_coefficient(w_qk, w_v),
        san_paths.cubic_residual_coefficient(w_qk, w_v, np.sqrt(D)),
        rtol=1e-6)
    with self.assertRaisesRegex(ValueError, "temperature"):
      san_paths.cubic_residual_coefficient(w_qk, w_v, -1.0)

  def test_cubic_bound_closed_form(self):
    b = san_paths.cubic_residual_bound(jnp.float32(0.5), jnp.full((4,), 2.0))
    l = np.arange(5)
    np.testing.assert_allclose(b, 2.0**((3.0**l - 1) / 2) * 0.5**(3.0**l),
                               rtol=1e-5)


class CollapseBoundTest(absltest.TestCase):

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


if __name__ == "__main__":
  absltest.main()
