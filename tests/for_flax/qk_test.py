"""Tests for qkspec.for_flax.qk: W_QK, LocATER, spectra against NumPy."""
from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import for_flax
from qkspec.config import defaults
from qkspec.theory import locater
from qkspec.training import model as model_lib
import flax_fixtures


T, d, H = flax_fixtures.FLAX_T, flax_fixtures.FLAX_D, flax_fixtures.FLAX_H
D = d // H
LinenNet, NnxNet = flax_fixtures.flax_nets()
_inputs, _np = flax_fixtures.flax_inputs, flax_fixtures.float64_tree


def np_qk(layer):
  """W_QK [H, d, d] of one layer's parameters, head by head."""
  wq, wk = layer["query"]["kernel"], layer["key"]["kernel"]
  return np.stack([wq[:, h, :] @ wk[:, h, :].T for h in range(wq.shape[1])])


class QKTest(parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_linen_qk_matrices_penalty_and_spectrum(self, use_bias):
    variables = LinenNet(use_bias).init(jax.random.key(0), _inputs())
    params = _np(variables["params"])
    self.assertEqual("bias" in params["attn_0"]["query"], use_bias)
    for tree in (variables, variables["params"]):
      qks = for_flax.qk_matrices(tree)
      self.assertEqual(sorted(qks), ["attn_0", "attn_1"])
      for name, w in qks.items():
        np.testing.assert_allclose(w, np_qk(params[name]), rtol=1e-5,
                                   atol=1e-6)
    hp = locater.LocaterHParams(kappa1=0.3, kappa2=0.7, target=0.5)
    want = sum(hp.kappa1 * np.sum(w**2) + hp.kappa2 * (np.trace(w)
                                                       - hp.target)**2
               for n in ("attn_0", "attn_1") for w in np_qk(params[n]))
    self.assertAlmostEqual(float(for_flax.locater_penalty(variables, hp)),
                           want, places=4)
    rows = for_flax.spectrum_table(variables)
    self.assertEqual([(r["path"], r["head"]) for r in rows],
                     [(f"attn_{l}", h) for l in range(2) for h in range(H)])
    for r in rows:
      w = np_qk(params[r["path"]])[r["head"]]
      sym = (w + w.T) / 2
      tr, tr2 = np.trace(w), np.sum(sym**2)
      np.testing.assert_allclose(
          [r[c] for c in ("scale", "trace", "xi", "eta", "r")],
          [np.sum(w**2), tr, tr / np.sqrt(tr2), np.sqrt(tr2 / D),
           tr / np.sqrt(D)], rtol=1e-4, atol=1e-6)

  def test_penalty_gradient_is_the_closed_form(self):
    # P = sum_h k1 ||W_h||_F^2 + k2 (tr W_h - tau)^2, W_h = Kq_h Kk_h^T with
    # Kq_h = Kq[:, h, :] [d, D]; dP/dW_h = 2 k1 W_h + 2 k2 (tr W_h - tau) I,
    # so dP/dKq_h = dP/dW_h Kk_h = 2 k1 W_h Kk_h + 2 k2 (tr W_h - tau) Kk_h.
    variables = LinenNet().init(jax.random.key(0), _inputs())
    hp = locater.LocaterHParams(kappa1=0.3, kappa2=0.7, target=0.5)
    grads = jax.jit(jax.grad(lambda p: for_flax.locater_penalty(p, hp)))(
        variables["params"])
    params = _np(variables["params"])
    for name in ("attn_0", "attn_1"):
      for h in range(H):
        kq = params[name]["query"]["kernel"][:, h, :]
        kk = params[name]["key"]["kernel"][:, h, :]
        w = kq @ kk.T
        want = 2 * hp.kappa1 * w @ kk + 2 * hp.kappa2 * (
            np.trace(w) - hp.target) * kk
        np.testing.assert_allclose(grads[name]["query"]["kernel"][:, h, :],
                                   want, rtol=1e-4, atol=1e-6)
      self.assertFalse(np.any(np.asarray(grads[name]["value"]["kernel"])))

  def test_nnx_module_and_state(self):
    model = NnxNet(nnx.Rngs(0))
    state = nnx.state(model, nnx.Param)
    params = _np(nnx.to_pure_dict(state))["layers"]
    hp = locater.LocaterHParams(kappa1=0.3, kappa2=0.7, target=0.5)
    for tree in (model, state):
      qks = for_flax.qk_matrices(tree)
      self.assertEqual(sorted(qks), ["layers/0", "layers/1"])
      for l in range(2):
        np.testing.assert_allclose(qks[f"layers/{l}"], np_qk(params[l]),
                                   rtol=1e-5, atol=1e-6)
    grads = nnx.grad(lambda m: for_flax.locater_penalty(m, hp))(model)
    kq = params[0]["query"]["kernel"][:, 1, :]
    kk = params[0]["key"]["kernel"][:, 1, :]
    w = kq @ kk.T
    np.testing.assert_allclose(
        grads["layers"][0]["query"]["kernel"][...][:, 1, :],
        2 * hp.kappa1 * w @ kk + 2 * hp.kappa2 * (np.trace(w) - 0.5) * kk,
        rtol=1e-4, atol=1e-6)
    rows = for_flax.spectrum_table(model)
    np.testing.assert_allclose(rows[3]["scale"], np.sum(np_qk(params[1])[1]
                                                        ** 2), rtol=1e-5)

  @parameterized.parameters("factored", "joint")
  def test_qkspec_model_found(self, qk_param):
    c = defaults.theory_config()
    c.model.update(d_model=d, ffn_dim=d, num_layers=2, num_heads=H,
                   qk_param=qk_param)
    model = model_lib.make_model(c.model, "theory")
    params = model.init(jax.random.key(0), jnp.zeros((1, T, d)))["params"]
    qks = for_flax.qk_matrices(params)
    want = model_lib.qk_matrices(params)
    self.assertEqual(sorted(qks), ["decoder/block_0/attn",
                                   "decoder/block_1/attn"])
    for l in range(2):
      np.testing.assert_allclose(qks[f"decoder/block_{l}/attn"], want[l],
                                 rtol=1e-6)

  def test_qk_spec_names_other_layouts(self):
    # wq/wk Dense kernels [d, D] (one head), and a fused kernel that
    # interleaves q, k, v per head (BLOOM's query_key_value [d, H*3*D]),
    # sliced by functions.
    qkv = np.asarray(jax.random.normal(jax.random.key(2), (d, 3 * d)))
    params = {"attn": {"wq": {"kernel": np.ones((d, D))},
                       "wk": {"kernel": np.eye(d, D)}},
              "fused": {"query_key_value": {"kernel": qkv}}}
    with self.assertRaisesRegex(ValueError, "query/kernel"):
      for_flax.qk_matrices(params)
    per_head = lambda i: lambda p: p["fused"]["query_key_value"][  # noqa: E731
        "kernel"].reshape(d, H, 3, D)[:, :, i]
    qks = for_flax.qk_matrices(params, qk_spec={
        "attn": ("attn/wq/kernel", "attn/wk/kernel"),
        "fused": (per_head(0), per_head(1))}, num_heads={"attn": 1})
    np.testing.assert_allclose(qks["attn"], (np.ones((d, D))
                                             @ np.eye(d, D).T)[None])
    np.testing.assert_allclose(qks["fused"], np_qk(
        {"query": {"kernel": qkv.reshape(d, H, 3, D)[:, :, 0]},
         "key": {"kernel": qkv.reshape(d, H, 3, D)[:, :, 1]}}),
                               rtol=1e-5, atol=1e-6)
    with self.assertRaisesRegex(ValueError, "(?s)no parameter 'attn/q/kernel'"
                                ".*attn/wq/kernel"):
      for_flax.qk_matrices(params, {"x": ("attn/q/kernel",
                                          "attn/wk/kernel")})

  def test_nothing_found_names_what_and_the_paths_seen(self):
    variables = nn.Dense(4).init(jax.random.key(0), np.ones((1, d)))
    with self.assertRaisesRegex(
        ValueError, r"(?s)looked for .*`query/kernel` and `key/kernel`.*"
        r"parameter paths seen:\n  bias \(4,\)\n  kernel \(8, 4\)"):
      for_flax.qk_matrices(variables)


if __name__ == "__main__":
  absltest.main()
