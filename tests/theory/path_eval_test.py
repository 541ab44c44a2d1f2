"""Tests for qkspec.theory.path_eval: restricted paths are Dong's sums."""
# pylint: disable=invalid-name
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import path_eval
from qkspec.theory import san
from qkspec.theory import san_paths
import theory_fixtures


SKIP = san.Architecture(skip=True)
SKIP_MLP = san.Architecture(skip=True, mlp=True)


def _net(key=0, L=3, H=2, d=8, T=5, F=12):
  k_p, k_x, k_b = jax.random.split(jax.random.key(key), 3)
  init, _ = theory_fixtures.jitted_san()
  params = init(k_p, num_layers=L, num_heads=H, dim=d, mlp_dim=F)
  # Non-zero biases, so the MLP's constant term is exercised.
  k_b1, k_b2 = jax.random.split(k_b)
  params["b1"] = 0.3 * jax.random.normal(k_b1, params["b1"].shape)
  params["b2"] = 0.3 * jax.random.normal(k_b2, params["b2"].shape)
  return params, jax.random.normal(k_x, (T, d))


class PathEvalTest(parameterized.TestCase):

  @parameterized.named_parameters(("skip", SKIP), ("skip_mlp", SKIP_MLP))
  def test_all_paths_are_the_full_network(self, arch):
    with jax.enable_x64(True):
      params, x = _net()
      params = jax.tree.map(lambda a: a.astype(jnp.float64), params)
      x = x.astype(jnp.float64)
      y_KxTxd = path_eval.restricted_outputs(params, x, arch)
      full = san.forward(params, x, arch)["outputs"][-1]
      np.testing.assert_allclose(y_KxTxd[-1], full, rtol=1e-12, atol=1e-12)
      self.assertEqual(y_KxTxd.shape, (4,) + x.shape)
      # The restriction matters: fewer paths is another function.
      self.assertGreater(float(jnp.abs(y_KxTxd[-2] - full).max()), 1e-3)

  def test_zero_length_is_the_identity_path(self):
    params, x = _net()
    y_KxTxd = path_eval.restricted_outputs(params, x, SKIP)
    np.testing.assert_array_equal(y_KxTxd[0], x)

  def test_zero_length_with_mlps_is_the_token_wise_path(self):
    # Length 0 with MLPs: no attention, each MLP with the full net's gates.
    params, x = _net()
    xs = san.forward(params, x, SKIP_MLP)["outputs"]
    z = x
    for l in range(params["w_qk"].shape[0]):
      h = xs[l] + san.self_attention(xs[l], params["w_qk"][l],
                                     params["w_v"][l])[0]
      b1, b2 = params["b1"][l][None, :], params["b2"][l][None, :]
      gate = (h @ params["w1"][l] + b1 > 0).astype(x.dtype)
      z = z + (gate * (z @ params["w1"][l] + b1)) @ params["w2"][l] + b2
    y0 = path_eval.restricted_outputs(params, x, SKIP_MLP)[0]
    np.testing.assert_allclose(y0, z, rtol=1e-5, atol=1e-5)

  def test_without_mlps_it_is_path_length_components(self):
    params, x = _net()
    probs = san.forward(params, x, SKIP)["probs"]
    np.testing.assert_allclose(
        path_eval.length_components(params, x, SKIP),
        san_paths.path_length_components(x, probs, params["w_v"]),
        rtol=1e-6, atol=1e-6)

  def test_lengths_match_enumerated_paths(self):
    # Brute force: a skip net is the pure SAN with an identity head added;
    # enumerate_paths over H + 1 heads and group by the non-identity heads.
    params, x = _net(L=3, H=2)
    L, H, T = 3, 2, x.shape[0]
    probs = san.forward(params, x, SKIP)["probs"]
    eye_P = jnp.broadcast_to(jnp.eye(T), (L, 1, T, T))
    eye_W = jnp.broadcast_to(jnp.eye(x.shape[1]),
                             (L, 1) + params["w_v"].shape[2:])
    y_KxTxd, heads_KxL = san_paths.enumerate_paths(
        x, jnp.concatenate([eye_P, probs], 1),
        jnp.concatenate([eye_W, params["w_v"]], 1))
    lengths = (heads_KxL > 0).sum(1)
    z = path_eval.length_components(params, x, SKIP)
    for k in range(L + 1):
      np.testing.assert_allclose(z[k], y_KxTxd[lengths == k].sum(0),
                                 rtol=1e-5, atol=1e-5)
    del H

  def test_layernorm_and_no_skip_are_refused(self):
    params, x = _net()
    for arch in (san.Architecture(), san.Architecture(skip=True,
                                                      layernorm=True)):
      with self.assertRaisesRegex(ValueError, "skip connections"):
        path_eval.length_components(params, x, arch)

  def test_without_layer_attention_skips_that_layer(self):
    params, x = _net()
    cut = path_eval.without_layer_attention(params, 0)
    xs = san.forward(cut, x, SKIP)["outputs"]
    np.testing.assert_array_equal(xs[1], x)
    np.testing.assert_array_equal(cut["w_v"][1:], params["w_v"][1:])


if __name__ == "__main__":
  absltest.main()
