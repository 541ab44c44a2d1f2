"""Tests for qkspec.for_flax.attention: the attention table against NumPy."""
from absl.testing import absltest
from absl.testing import parameterized
from flax import nnx
import jax
import numpy as np

from qkspec import for_flax
import testutil


T, d, H = testutil.FLAX_T, testutil.FLAX_D, testutil.FLAX_H
D = d // H
LENGTHS = np.array([5, 3, 4])           # tokens per sequence, then padding
LinenNet, NnxNet = testutil.flax_nets()
_inputs, _np = testutil.flax_inputs, testutil.float64_tree


def _padding_mask():
  """Bool [B, 1, T, T]: both tokens real."""
  real = np.arange(T)[None, :] < LENGTHS[:, None]
  return (real[:, None, :, None] & real[:, None, None, :])


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


if __name__ == "__main__":
  absltest.main()
