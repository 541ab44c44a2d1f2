"""Tests for qkspec.theory.san: pure self-attention networks (Dong, 2021)."""
from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import san
import theory_fixtures


init_params, forward = theory_fixtures.jitted_san()

L, H, D, T = 3, 2, 8, 6


def _params(seed=0, **kw):
  return init_params(jax.random.key(seed), num_layers=L, num_heads=H,
                         dim=D, mlp_dim=16, **kw)


def _x(seed=1, n=1):
  return san.sample_inputs(jax.random.key(seed), "gaussian", n, T, D)


class SanTest(parameterized.TestCase):

  @parameterized.named_parameters(*[(n, n) for n in san.ARCHITECTURES])
  def test_shapes_and_stochastic_rows(self, name):
    out = forward(_params(), _x()[0], san.ARCHITECTURES[name])
    chex.assert_shape(out["outputs"], (L + 1, T, D))
    chex.assert_shape(out["logits"], (L, H, T, T))
    chex.assert_shape(out["probs"], (L, H, T, T))
    chex.assert_tree_all_finite(out)
    np.testing.assert_allclose(out["probs"].sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(out["outputs"][0], _x()[0])

  def test_self_attention_matches_per_head_loop(self):
    p = _params()
    x = _x()[0]
    out, logits, probs = san.self_attention(x, p["w_qk"][0], p["w_v"][0], 2.0)
    naive = 0.0
    for h in range(H):
      s = np.asarray(x) @ np.asarray(p["w_qk"][0, h]) @ np.asarray(x).T / 2.0
      a = np.exp(s - s.max(1, keepdims=True))
      a /= a.sum(1, keepdims=True)
      np.testing.assert_allclose(logits[h], s, rtol=1e-5, atol=1e-5)
      np.testing.assert_allclose(probs[h], a, rtol=1e-5, atol=1e-6)
      naive = naive + a @ np.asarray(x) @ np.asarray(p["w_v"][0, h])
    np.testing.assert_allclose(out, naive, rtol=1e-4, atol=1e-5)

  def test_layer_norm_values(self):
    x = np.array([[1.0, 2.0, 3.0, 4.0], [-2.0, 0.0, 0.0, 6.0]])
    # means 2.5 and 1; variances 1.25 and 9
    want = np.array([[-1.5, -0.5, 0.5, 1.5] / np.sqrt(1.25 + 1e-6),
                     [-3.0, -1.0, -1.0, 5.0] / np.sqrt(9.0 + 1e-6)])
    np.testing.assert_allclose(san.layer_norm(jnp.asarray(x)), want,
                               rtol=1e-6)
    np.testing.assert_allclose(san.layer_norm(jnp.asarray(x), eps=1.0),
                               [[-1.5, -0.5, 0.5, 1.5] / np.sqrt(2.25),
                                [-3.0, -1.0, -1.0, 5.0] / np.sqrt(10.0)],
                               rtol=1e-6)

  @parameterized.named_parameters(*[(n, n) for n in san.ARCHITECTURES])
  def test_forward_equals_numpy_from_raw_weights(self, name):
    """Every layer's output, logits and probabilities equal a NumPy SAN
    written from the module docstring (Post-LN order)."""
    arch = san.ARCHITECTURES[name]
    params = dict(_params())
    rng = np.random.default_rng(0)             # biases away from their 0 init
    for b in ("b1", "b2"):
      params[b] = jnp.asarray(rng.normal(size=params[b].shape), jnp.float32)
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = np.asarray(_x()[0], np.float64)
    out = forward(params, _x()[0], arch)

    def layer_norm(y):
      centred = y - y.mean(-1, keepdims=True)
      return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-6)

    def sublayer(y, branch):
      y = y + branch if arch.skip else branch
      return layer_norm(y) if arch.layernorm else y

    lam = np.sqrt(D)
    for l in range(L):
      logits = np.stack([x @ p["w_qk"][l, h] @ x.T / lam for h in range(H)])
      probs = np.exp(logits - logits.max(-1, keepdims=True))
      probs /= probs.sum(-1, keepdims=True)
      attn = sum(probs[h] @ x @ p["w_v"][l, h] for h in range(H))
      np.testing.assert_allclose(out["logits"][l], logits, rtol=1e-4,
                                 atol=1e-4, err_msg=f"logits {l}")
      np.testing.assert_allclose(out["probs"][l], probs, atol=1e-5,
                                 err_msg=f"probs {l}")
      x = sublayer(x, attn)
      if arch.mlp:
        hidden = np.maximum(x @ p["w1"][l] + p["b1"][l], 0.0)
        x = sublayer(x, hidden @ p["w2"][l] + p["b2"][l])
      scale = max(1.0, float(np.abs(x).max()))
      np.testing.assert_allclose(out["outputs"][l + 1], x, rtol=1e-4,
                                 atol=1e-4 * scale, err_msg=f"layer {l}")

  @parameterized.named_parameters(*[(n, n) for n in san.ARCHITECTURES])
  def test_permutation_equivariance(self, name):
    """No positions: permuting input tokens permutes every layer's output."""
    p, x = _params(), _x()[0]
    perm = np.array([3, 0, 5, 1, 4, 2])
    arch = san.ARCHITECTURES[name]
    a = forward(p, x, arch)["outputs"][:, perm]
    b = forward(p, x[perm], arch)["outputs"]
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)

  @parameterized.named_parameters(*[(n, n) for n in san.ARCHITECTURES])
  def test_rank_one_input_stays_rank_one(self, name):
    """X = 1 x^T is a fixed point of token uniformity for every block."""
    x = jnp.ones((T, 1)) * jax.random.normal(jax.random.key(3), (1, D))
    out = forward(_params(), x, san.ARCHITECTURES[name])["outputs"]
    rel = diagnostics.relative_residual(out, "mean")
    np.testing.assert_array_less(rel, 1e-5)

  def test_uniform_attention_collapses_in_one_layer(self):
    """W_QK = 0 gives P = 11^T/T, so X^1 = 1 mean(X)^T W is exactly rank one."""
    p = _params()
    p["w_qk"] = jnp.zeros_like(p["w_qk"])
    out = forward(p, _x()[0])
    np.testing.assert_allclose(out["probs"], 1.0 / T, rtol=1e-6)
    rel = diagnostics.relative_residual(out["outputs"], "mean")
    self.assertGreater(float(rel[0]), 0.5)
    np.testing.assert_array_less(rel[1:], 1e-6)

  def test_spectrum_init_vmaps_over_grid(self):
    init = jax.jit(jax.vmap(lambda m, s: san.init_params(
        jax.random.key(0), num_layers=L, num_heads=H, dim=D,
        qk_init="spectrum", eigen_mean=m, eigen_std=s)["w_qk"]))
    w = init(jnp.array([0.0, 1.0, 0.3]), jnp.array([0.1, 0.1, 0.0]))
    chex.assert_shape(w, (3, L, H, D, D))
    eig_mean = jnp.trace(w, axis1=-2, axis2=-1).mean(axis=(1, 2)) / D
    self.assertLess(abs(float(eig_mean[0])), 0.1)
    self.assertLess(abs(float(eig_mean[1]) - 1.0), 0.1)
    np.testing.assert_allclose(w, jnp.swapaxes(w, -1, -2), atol=1e-5)
    # Zero scale: every eigenvalue is the mean, W_QK = mean * I.
    np.testing.assert_allclose(w[2], 0.3 * jnp.broadcast_to(
        jnp.eye(D), (L, H, D, D)), atol=1e-5)

  def test_default_eigen_std_is_one(self):
    kw = dict(num_layers=1, num_heads=H, dim=D, qk_init="spectrum",
              eigen_mean=0.2)
    np.testing.assert_array_equal(
        san.init_params(jax.random.key(0), **kw)["w_qk"],
        san.init_params(jax.random.key(0), eigen_std=1.0, **kw)["w_qk"])

  def test_value_inits(self):
    kw = dict(num_layers=1, num_heads=H, dim=D)
    ident = san.init_params(jax.random.key(0), value_init="identity",
                            **kw)["w_v"]
    np.testing.assert_allclose(ident.sum(1), jnp.eye(D)[None])
    orth = san.init_params(jax.random.key(0), value_init="orthogonal",
                           **kw)["w_v"] * np.sqrt(H)
    np.testing.assert_allclose(
        jnp.einsum("lhij,lhkj->lhik", orth, orth),
        jnp.broadcast_to(jnp.eye(D), (1, H, D, D)), atol=1e-5)

  def test_inputs_and_bad_arguments(self):
    chex.assert_shape(san.sample_inputs(jax.random.key(0), "random_walk", 3,
                                        T, D), (3, T, D))
    with self.assertRaises(ValueError):
      san.sample_inputs(jax.random.key(0), "text", 3, T, D)
    with self.assertRaises(ValueError):
      _params(qk_init="orthogonal")
    with self.assertRaises(ValueError):
      forward(_params(), _x(n=2))          # one sequence at a time


class SkipTest(absltest.TestCase):

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


if __name__ == "__main__":
  absltest.main()
