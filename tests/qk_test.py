"""Tests for qkspec.for_flax: each function against NumPy on the raw kernels.

Models: two `nn.MultiHeadDotProductAttention` layers (two heads, with and
without biases) and two `nnx.MultiHeadAttention` layers, each with skips;
qkspec's own model; a custom layout through `qk_spec`.
"""
import pathlib
import shutil
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import for_flax
from qkspec.config import defaults
from qkspec.experiments import for_flax_example
from qkspec.theory import locater
from qkspec.training import model as model_lib
import testutil


B, T, d, H = 3, 5, 8, 2
D = d // H
LENGTHS = np.array([5, 3, 4])           # tokens per sequence, then padding


class LinenNet(nn.Module):
  use_bias: bool = True

  @nn.compact
  def __call__(self, x, mask=None):
    for l in range(2):
      x = x + nn.MultiHeadDotProductAttention(
          H, use_bias=self.use_bias, name=f"attn_{l}")(x, mask=mask,
                                                        sow_weights=True)
    return x


class NnxNet(nnx.Module):

  def __init__(self, rngs):
    self.layers = nnx.List([nnx.MultiHeadAttention(H, d, decode=False,
                                                   rngs=rngs)
                            for _ in range(2)])

  def __call__(self, x, mask=None, sow=False):
    for layer in self.layers:
      x = x + layer(x, mask=mask, is_causal=True, sow_weights=sow)
    return x


def _inputs():
  return np.asarray(jax.random.normal(jax.random.key(1), (B, T, d)))


def _padding_mask():
  """Bool [B, 1, T, T]: both tokens real."""
  real = np.arange(T)[None, :] < LENGTHS[:, None]
  return (real[:, None, :, None] & real[:, None, None, :])


def _np(tree):
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def np_qk(layer):
  """W_QK [H, d, d] of one layer's parameters, head by head."""
  wq, wk = layer["query"]["kernel"], layer["key"]["kernel"]
  return np.stack([wq[:, h, :] @ wk[:, h, :].T for h in range(wq.shape[1])])


def np_attention(layer, x, visible):
  """One Flax attention layer: raw logits, weights, output (NumPy)."""
  def project(name):
    p = layer[name]
    return np.einsum("btd,dhk->bthk", x, p["kernel"]) + p.get("bias", 0.0)
  q, k, v = project("query"), project("key"), project("value")
  logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(D)
  masked = np.where(visible, logits, -1e30)
  w = np.exp(masked - masked.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  out = np.einsum("bthk,hkd->btd", np.einsum("bhts,bshk->bthk", w, v),
                  layer["out"]["kernel"]) + layer["out"].get("bias", 0.0)
  return logits, w, out


def np_entropy(w, visible):
  """Mean entropy per head over (batch, queries that see a key) [H]."""
  visible = np.broadcast_to(visible, w.shape)
  terms = np.where(visible & (w > 0), -w * np.log(np.where(w > 0, w, 1)), 0)
  valid = visible.any(-1)                         # [B, H, T]
  return (terms.sum(-1) * valid).sum((0, 2)) / valid.sum((0, 2))


def np_rho(logits):
  """Empirical rho_i of the last query [H, S] (Definition 1)."""
  omega = logits[:, :, -1, :]                     # [B, H, S]
  s = omega.shape[-1]
  u = (omega - omega.mean(-1, keepdims=True)) / s + 1 / s
  return ((u >= 0) & (u <= 1)).mean(0)


def np_residual(out):
  res = out - out.mean(1, keepdims=True)
  return np.mean(np.sqrt((res**2).sum((1, 2)) / (out**2).sum((1, 2))))


def _check_rows(test, rows, params, names, x, visible):
  """The attention table equals the NumPy forward pass layer by layer."""
  for name in names:
    logits, w, out = np_attention(params[name], x, visible)
    got = [r for r in rows if r["path"] == name]
    test.assertEqual([r["head"] for r in got], list(range(H)))
    np.testing.assert_allclose([r["entropy"] for r in got],
                               np_entropy(w, visible), rtol=1e-4)
    np.testing.assert_allclose([r["rho"] for r in got], np_rho(logits))
    np.testing.assert_allclose([r["rank_residual"] for r in got],
                               [np_residual(out)] * H, rtol=1e-4)
    x = x + out


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
    # q_proj/k_proj Dense kernels [d, D] (one head), and a fused QKV kernel
    # [d, 3, H, D] sliced by a function.
    params = {"attn": {"q_proj": {"kernel": np.ones((d, D))},
                       "k_proj": {"kernel": np.eye(d, D)}},
              "fused": {"qkv": {"kernel": np.asarray(jax.random.normal(
                  jax.random.key(2), (d, 3, H, D)))}}}
    with self.assertRaisesRegex(ValueError, "query/kernel"):
      for_flax.qk_matrices(params)
    qks = for_flax.qk_matrices(params, qk_spec={
        "attn": ("attn/q_proj/kernel", "attn/k_proj/kernel"),
        "fused": (lambda p: p["fused"]["qkv"]["kernel"][:, 0],
                  lambda p: p["fused"]["qkv"]["kernel"][:, 1])})
    np.testing.assert_allclose(qks["attn"], (np.ones((d, D))
                                             @ np.eye(d, D).T)[None])
    fused = params["fused"]["qkv"]["kernel"]
    np.testing.assert_allclose(qks["fused"], np_qk(
        {"query": {"kernel": fused[:, 0]}, "key": {"kernel": fused[:, 1]}}),
                               rtol=1e-5, atol=1e-6)
    with self.assertRaisesRegex(ValueError, "(?s)no parameter 'attn/q/kernel'"
                                ".*attn/q_proj/kernel"):
      for_flax.qk_matrices(params, {"x": ("attn/q/kernel", "attn/q/kernel")})

  def test_nothing_found_names_what_and_the_paths_seen(self):
    variables = nn.Dense(4).init(jax.random.key(0), np.ones((1, d)))
    with self.assertRaisesRegex(
        ValueError, r"(?s)looked for .*`query/kernel` and `key/kernel`.*"
        r"parameter paths seen:\n  kernel \(8, 4\)\n  bias \(4,\)"):
      for_flax.qk_matrices(variables)
    with self.assertRaisesRegex(ValueError, "no attention layer ran"):
      for_flax.attention_table(nn.Dense(4).apply, variables, np.ones((1, d)))


class AttentionTableTest(parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_linen_against_numpy_and_sown_weights(self, use_bias):
    x, model = _inputs(), LinenNet(use_bias)
    variables = model.init(jax.random.key(0), x)
    mask = _padding_mask() & np.tril(np.ones((T, T), bool))
    rows = for_flax.attention_table(model.apply, variables, x, mask=mask)
    _check_rows(self, rows, _np(variables["params"]), ["attn_0", "attn_1"],
                x.astype(np.float64), mask)
    _, sown = model.apply(variables, x, mask=mask, mutable=["intermediates"])
    for name in ("attn_0", "attn_1"):
      w = np.asarray(sown["intermediates"][name]["attention_weights"][0])
      hidden = ~np.broadcast_to(mask, w.shape) & mask.any(-1, keepdims=True)
      self.assertTrue(np.all(w[hidden] == 0), "masked keys get weight 0")
      np.testing.assert_allclose(
          [r["entropy"] for r in rows if r["path"] == name],
          np_entropy(w, mask), rtol=1e-5)

  def test_nnx_against_numpy_and_sown_weights(self):
    x, model = _inputs(), NnxNet(nnx.Rngs(0))
    mask = _padding_mask()
    visible = mask & np.tril(np.ones((T, T), bool))
    before = nnx.to_pure_dict(nnx.state(model))
    rows = for_flax.attention_table(lambda m, x: m(x, mask=mask), model, x)
    same = jax.tree.map(np.array_equal, before,
                        nnx.to_pure_dict(nnx.state(model)))
    self.assertTrue(all(jax.tree.leaves(same)), "the model is unchanged")
    params = _np(nnx.to_pure_dict(nnx.state(model, nnx.Param)))["layers"]
    _check_rows(self, [dict(r, path=int(r["path"].split("/")[1]))
                       for r in rows], params, [0, 1],
                x.astype(np.float64), visible)
    _, sown = nnx.capture(model, nnx.Intermediate)(x, mask=mask, sow=True)
    for l in range(2):
      w = np.asarray(sown["layers"][l]["attention_weights"][0])
      np.testing.assert_allclose(
          [r["entropy"] for r in rows if r["path"] == f"layers/{l}"],
          np_entropy(w, visible), rtol=1e-5)


@testutil.slow("the worked example trained twice and drawn; the functions it "
               "calls are tested above")
class ExampleTest(absltest.TestCase):

  def test_smoke_run_writes_tables_and_locater_lowers_the_scale(self):
    workdir = pathlib.Path(tempfile.mkdtemp())
    self.addCleanup(shutil.rmtree, workdir, ignore_errors=True)
    config = testutil.get_config("for_flax_example", "smoke")
    out = for_flax_example.run(config, workdir / "run")
    for name in ("spectrum.csv", "attention.json", "summary.csv",
                 "fig_for_flax_example.png"):
      self.assertTrue((workdir / "run" / name).is_file(), name)
    scale = {}
    for r in out["spectrum"]:
      scale.setdefault(r["stage"], []).append(r["scale"])
    heads = 2 * config.num_layers
    self.assertEqual({k: len(v) for k, v in scale.items()},
                     dict(init=heads, plain=heads, locater=heads))
    self.assertTrue(np.all(np.less(scale["locater"], scale["init"])), scale)
    self.assertTrue(np.all(np.less(scale["locater"], scale["plain"])), scale)
    entropy = [r["entropy"] for r in out["attention"]]
    self.assertLen(entropy, 3 * heads)
    self.assertTrue(np.all(np.isfinite(entropy)))


if __name__ == "__main__":
  absltest.main()
