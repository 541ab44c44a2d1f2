"""Tests for qkspec.for_flax.qk_norm: QK-norm gains folded into W_QK.

Checked against NumPy from the raw kernels and gains, and against the
logits flax's own QK-norm attention computes: they are the folded bilinear
form over the per-token norms.
"""
from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
from flax import nnx
import jax
import numpy as np

from qkspec import for_flax
from qkspec.theory import locater
import flax_fixtures

d, N, T = flax_fixtures.FLAX_D, flax_fixtures.GQA_N, flax_fixtures.FLAX_T
D = d // N
HP = locater.LocaterHParams(kappa1=0.3, kappa2=0.7, target=0.5)


def np_folded(wq, wk, gq, gk, centred):
  """W_QK [N, d, d]: Wq_h C diag(gq) diag(gk) C Wk_{h // (N/K)}^T."""
  width = wq.shape[-1]
  c = np.eye(width) - centred * np.ones((width, width)) / width
  group = wq.shape[1] // wk.shape[1]
  gains = np.diag(gq * gk * np.ones(width))
  return np.stack([wq[:, h] @ c @ gains @ c @ wk[:, h // group].T
                   for h in range(wq.shape[1])])


def _tree(q_norm_name, k_norm_name, gains=(1.5, 0.5), K=2):
  """One layer, q_proj/k_proj kernels [d, N, D], [d, K, D] and two norms."""
  rng = np.random.default_rng(0)
  return {"attn": {"q_proj": {"kernel": rng.standard_normal((d, N, D))},
                   "k_proj": {"kernel": rng.standard_normal((d, K, D))},
                   q_norm_name: {"scale": gains[0] + rng.random(D)},
                   k_norm_name: {"scale": gains[1] + rng.random(D)}}}


class QKNormTest(parameterized.TestCase):

  def test_flax_normalize_qk_folds_into_the_logits_bilinear_form(self):
    layer = flax_fixtures.nnx_attention(num_kv_heads=2, normalize_qk=True)
    p = flax_fixtures.float64_tree(nnx.to_pure_dict(nnx.state(layer,
                                                              nnx.Param)))
    gq, gk = p["query_ln"]["scale"], p["key_ln"]["scale"]
    self.assertGreater(np.abs(gq - 1).max(), 0.3, "gains moved off 1")
    want = np_folded(p["query"]["kernel"], p["key"]["kernel"], gq, gk, True)
    got = for_flax.qk_matrices(layer)[""]
    flax_fixtures.assert_close("W_QK normalize_qk", got, want, rtol=1e-5,
                               atol=1e-6)
    # the layer's logits (biases zeroed) are x_t W x_s / (sigma_q sigma_k
    # sqrt(D)), sigma the per-token LayerNorm denominators
    for name in ("query", "key"):
      p[name]["bias"] = 0 * p[name]["bias"]
    x = flax_fixtures.flax_inputs().astype(np.float64)
    logits, _, _ = flax_fixtures.np_attention(p, x, True)
    sigma = {n: np.sqrt(np.einsum("btd,dhk->bthk", x, p[n]["kernel"]).var(
        -1) + 1e-6) for n in ("query", "key")}
    sigma["key"] = np.repeat(sigma["key"], 2, axis=2)
    bilinear = np.einsum("bti,hij,bsj->bhts", x, want, x) / np.sqrt(D)
    flax_fixtures.assert_close(
        "logits of the folded W_QK", bilinear / np.einsum(
            "bth,bsh->bhts", sigma["query"], sigma["key"]), logits,
        rtol=1e-6, atol=1e-9)
    raw = np_folded(p["query"]["kernel"], p["key"]["kernel"], 1, 1, False)
    self.assertGreater(np.abs(raw - want).max() / np.abs(want).max(), 0.3)
    flax_fixtures.assert_close("penalty normalize_qk", for_flax.locater_penalty(
        layer, HP), flax_fixtures.np_penalty(want, HP), rtol=1e-5)
    rows = for_flax.spectrum_table(layer, temperature=2.0)
    for column, value in flax_fixtures.np_spectrum(want, 2.0).items():
      flax_fixtures.assert_close(f"{column} normalize_qk",
                                 [r[column] for r in rows], value, rtol=1e-5)

  def test_linen_normalize_qk(self):
    x = flax_fixtures.flax_inputs()
    params = nn.MultiHeadDotProductAttention(2, normalize_qk=True).init(
        jax.random.key(0), x)["params"]
    params["query_ln"]["scale"] = params["query_ln"]["scale"] * 2.0
    p = flax_fixtures.float64_tree(params)
    want = np_folded(p["query"]["kernel"], p["key"]["kernel"],
                     p["query_ln"]["scale"], p["key_ln"]["scale"], True)
    flax_fixtures.assert_close("W_QK linen normalize_qk",
                               for_flax.qk_matrices(params)[""], want,
                               rtol=1e-5, atol=1e-6)

  @parameterized.named_parameters(
      ("rms", "rms", 0.0), ("rms_one_plus", "rms_one_plus", 1.0),
      ("layer", "layer", None))
  def test_a_name_that_does_not_say_needs_qk_norm(self, form, offset):
    params = _tree("q_norm", "k_norm")
    with self.assertRaisesRegex(ValueError, "'attn'.*pass qk_norm='rms' or "
                                "'rms_one_plus'"):
      for_flax.qk_matrices(params)
    a = params["attn"]
    gq, gk = (a[n]["scale"] + (offset or 0.0) for n in ("q_norm", "k_norm"))
    want = np_folded(a["q_proj"]["kernel"], a["k_proj"]["kernel"], gq, gk,
                     offset is None)
    for qk_norm in (form, {"attn": form}):
      flax_fixtures.assert_close(f"W_QK {form}", for_flax.qk_matrices(
          params, qk_norm=qk_norm)["attn"], want, rtol=1e-5, atol=1e-6)

  def test_nnx_rms_norm_is_read_from_its_class(self):
    # bonsai's Qwen3 attention: nnx.Einsum q_proj/k_proj, nnx.RMSNorm q_norm

    class Qwen3Attention(nnx.Module):

      def __init__(self, rngs):
        self.q_proj = nnx.Einsum("BTD,DNH->BTNH", (d, N, D), rngs=rngs)
        self.k_proj = nnx.Einsum("BSD,DKH->BSKH", (d, 1, D), rngs=rngs)
        self.q_norm = nnx.RMSNorm(D, rngs=rngs)
        self.k_norm = nnx.RMSNorm(D, rngs=rngs)

    layer = Qwen3Attention(nnx.Rngs(0))
    layer.q_norm.scale[...] = layer.q_norm.scale[...] * 3.0
    p = flax_fixtures.float64_tree(nnx.to_pure_dict(nnx.state(layer)))
    want = np_folded(p["q_proj"]["kernel"], p["k_proj"]["kernel"],
                     p["q_norm"]["scale"], p["k_norm"]["scale"], False)
    flax_fixtures.assert_close("W_QK nnx.RMSNorm q_norm",
                               for_flax.qk_matrices(layer)[""], want,
                               rtol=1e-5, atol=1e-6)
    with self.assertRaisesRegex(ValueError, "pass qk_norm"):
      for_flax.qk_matrices(nnx.state(layer))     # the state has no classes

  def test_what_cannot_be_folded_is_refused(self):
    params = _tree("query_norm", "key_norm")
    params["attn"]["query_norm"]["scale"] = np.ones(N * D)    # OLMo's
    with self.assertRaisesRegex(ValueError, "not one per feature of a head"):
      for_flax.qk_matrices(params)
    for bad, msg in (("rms2", "qk_norm must be one of"),
                     ({"attn": "rms", "other": "rms"},
                      r"qk_norm names \['other'\]")):
      with self.assertRaisesRegex(ValueError, msg):
        for_flax.spectrum_table(_tree("q_norm", "k_norm"), qk_norm=bad)
    with self.assertRaisesRegex(ValueError, "with qk_spec, fold"):
      for_flax.qk_matrices(params, {"x": ("attn/q_proj/kernel",
                                          "attn/k_proj/kernel")},
                           qk_norm="rms")


if __name__ == "__main__":
  absltest.main()
