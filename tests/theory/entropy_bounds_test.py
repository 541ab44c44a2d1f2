"""Tests for qkspec.theory.entropy_bounds: Zhai's bound, tight and holding."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import entropy_bounds


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


if __name__ == "__main__":
  absltest.main()
