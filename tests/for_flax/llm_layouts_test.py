"""Tests for qkspec.for_flax.llm_layouts and the LLM layouts of layouts.

Parameter trees with the names and shapes gemma 4.0.1, MaxText 0.2.5 and
jax-ml/bonsai write (random values), read without a qk_spec: W_QK, the
penalty and the spectrum against NumPy from the raw kernels, and W_QK
against the logits each library's own einsums compute (gemma's
'BTD,NDH->BTNH', 'BSD,CKDH->CBSKH', 'BTKGH,BSKH->BTKGS'; MaxText's and
bonsai's [d, N, D] kernels). tests/for_flax/real_llms_test.py checks the
same on the libraries' own models where they install.
"""
# pylint: disable=invalid-name
from absl.testing import absltest
from absl.testing import parameterized
import numpy as np

from qkspec import for_flax
from qkspec.theory import locater
import flax_fixtures

d, N, K, D, L = 8, 4, 2, 2, 3      # width, query / key heads, head width
HP = locater.LocaterHParams(kappa1=0.3, kappa2=0.7, target=0.5)
_rng = np.random.default_rng(0)
np_qk = flax_fixtures.np_qk


def _normal(*shape):
  return _rng.standard_normal(shape)


def gemma_logits(x, q_w, kv_w):
  """gemma's unscaled logits [B, T, N, S] by its own einsums (Gemma 2/3
  grouped-query attention, modules.Attention)."""
  q = np.einsum("BTD,NDH->BTNH", x, q_w)
  k = np.einsum("BSD,CKDH->CBSKH", x, kv_w)[0]
  b, t, n, h = q.shape
  logits = np.einsum("BTKGH,BSKH->BTKGS", q.reshape(b, t, K, n // K, h), k)
  return logits.reshape(b, t, n, -1)


class GemmaTest(parameterized.TestCase):

  def test_gemma2_grouped_query_einsums(self):
    q_w, kv_w = _normal(N, d, D), _normal(2, K, d, D)
    params = {"transformer": {"layer_0": {"attn": {
        "q_einsum": {"w": q_w}, "kv_einsum": {"w": kv_w},
        "attn_vec_einsum": {"w": _normal(N, D, d)}}}}}
    w_qk = for_flax.qk_matrices(params)["transformer/layer_0/attn"]
    x = _normal(2, 5, d)
    flax_fixtures.assert_close(
        "gemma logits", np.einsum("bti,hij,bsj->bths", x, w_qk, x),
        gemma_logits(x, q_w, kv_w),
        rtol=1e-4, atol=1e-4)
    want = np_qk(q_w.transpose(1, 0, 2), kv_w[0].transpose(1, 0, 2))
    flax_fixtures.assert_close("W_QK gemma 2", w_qk, want, rtol=1e-5,
                               atol=1e-6)
    # gemma divides nothing by sqrt(D): its query_pre_attn_scalar s scales
    # the queries, so lambda = 1/s (Gemma 2 27B: s = (d/N)^-1/2)
    s = (d / N) ** -0.5
    rows = for_flax.spectrum_table(params, temperature=1 / s)
    flax_fixtures.assert_close("r gemma", [r["r"] for r in rows],
                               np.trace(want, axis1=1, axis2=2) * s,
                               atol=flax_fixtures.trace_atol(want) * s)

  def test_gemma3_fused_einsum_and_its_one_plus_scale_norms(self):
    qkv_w = _normal(3, N, d, D)
    gq, gk = _normal(D), _normal(D)
    params = {"layer_0": {"attn": {"qkv_einsum": {"w": qkv_w},
                                   "_query_norm": {"scale": gq},
                                   "_key_norm": {"scale": gk}}}}
    q, k = (qkv_w[i].transpose(1, 0, 2) * (1 + g)
            for i, g in ((0, gq), (1, gk)))
    flax_fixtures.assert_close("W_QK gemma 3", for_flax.qk_matrices(params)[
        "layer_0/attn"], np_qk(q, k), rtol=1e-5, atol=1e-6)
    flax_fixtures.assert_close(
        "penalty gemma 3", for_flax.locater_penalty(params, HP),
        flax_fixtures.np_penalty(np_qk(q, k), HP), rtol=1e-5)

  def test_gemma4_k_einsum_and_its_scale_norms(self):
    q_w, k_w, gq = _normal(N, d, D), _normal(K, d, D), _normal(D)
    params = {"attn": {"q_einsum": {"w": q_w}, "k_einsum": {"w": k_w},
                       "query_norm": {"scale": gq},
                       "key_norm": {"scale": np.ones(D)}}}
    flax_fixtures.assert_close(
        "W_QK gemma 4", for_flax.qk_matrices(params)["attn"],
        np_qk(q_w.transpose(1, 0, 2) * gq, k_w.transpose(1, 0, 2)),
        rtol=1e-5, atol=1e-6)

  def test_names_decide_a_shape_two_layouts_share(self):
    # [4, 4, 2] is [N, d, D] under gemma's name, [d, N, D] under flax's
    w = _normal(4, 4, 2)
    gemma = for_flax.qk_matrices({"q_einsum": {"w": w},
                                  "k_einsum": {"w": w}})[""]
    flax = for_flax.qk_matrices({"query": {"kernel": w},
                                 "key": {"kernel": w}})[""]
    np.testing.assert_allclose(gemma, np_qk(w.transpose(1, 0, 2),
                                            w.transpose(1, 0, 2)), rtol=1e-5)
    np.testing.assert_allclose(flax, np_qk(w, w), rtol=1e-5)
    self.assertGreater(np.abs(gemma - flax).max(), 0.1)
    with self.assertRaisesRegex(ValueError, r"kv_einsum/w must be \[2, K"):
      for_flax.qk_matrices({"q_einsum": {"w": w}, "kv_einsum": {"w": w}})


def _maxtext_layer(scanned, qk_norm=False):
  """MaxText's self_attention parameters: query [d, N, D], key [d, K, D],
  value, out [N, D, d]; scanned (param_scan_axis=1) with L second, norms
  [D, L]."""
  def stack(*shape):
    return _normal(*shape[:1], L, *shape[1:]) if scanned else _normal(*shape)
  layer = {"query": {"kernel": stack(d, N, D)},
           "key": {"kernel": stack(d, K, D)},
           "value": {"kernel": stack(d, K, D)},
           "out": {"kernel": stack(N, D, d)}}
  if qk_norm:
    layer.update(query_norm={"scale": stack(D)}, key_norm={"scale": stack(D)})
  return layer


class MaxTextTest(parameterized.TestCase):

  @parameterized.named_parameters(("llama", False, False),
                                  ("llama_scanned", True, False),
                                  ("qwen3_scanned", True, True))
  def test_query_key_kernels(self, scanned, qk_norm):
    attn = _maxtext_layer(scanned, qk_norm)
    params = {"params": {"decoder": (
        {"layers": {"self_attention": attn}} if scanned else
        {"layers_0": {"self_attention": attn}})}}
    qks = for_flax.qk_matrices(params)
    paths = ([f"decoder/layers/self_attention/{l}" for l in range(L)]
             if scanned else ["decoder/layers_0/self_attention"])
    self.assertEqual(list(qks), paths)
    for l, path in enumerate(paths):
      take = (lambda a, l=l: a[:, l]) if scanned else (lambda a: a)
      q, k = take(attn["query"]["kernel"]), take(attn["key"]["kernel"])
      if qk_norm:
        q, k = (q * take(attn["query_norm"]["scale"]),
                k * take(attn["key_norm"]["scale"]))
      want = np_qk(q, k)
      flax_fixtures.assert_close(f"W_QK MaxText {path}", qks[path], want,
                                 rtol=1e-5, atol=1e-6)
    # MaxText's Llama divides its logits by nothing (1/sqrt(D) is in the
    # query's initialisation): temperature 1 for the whole stack
    stack_path = paths[0].rsplit("/", 1)[0] if scanned else paths[0]
    rows = for_flax.spectrum_table(params, temperature={stack_path: 1.0})
    flax_fixtures.assert_close("r MaxText", rows[-1]["r"], np.trace(
        want[-1]), atol=flax_fixtures.trace_atol(want[-1]))
    default = for_flax.spectrum_table(params)
    np.testing.assert_allclose(rows[-1]["eta"],
                               default[-1]["eta"] * np.sqrt(D), rtol=1e-5)

  @parameterized.parameters(False, True)
  def test_fused_qkv_projection(self, scanned):
    # fused_qkv: qkv_proj [d, N + 2K, D] split at N and N + K
    kernel = _normal(d, L, N + 2 * K, D) if scanned else _normal(
        d, N + 2 * K, D)
    out = _normal(N, L, D, d) if scanned else _normal(N, D, d)
    params = {"self_attention": {"qkv_proj": {"kernel": kernel},
                                 "out": {"kernel": out}}}
    qks = for_flax.qk_matrices(params)
    kernels = [kernel[:, l] for l in range(L)] if scanned else [kernel]
    self.assertLen(qks, len(kernels))
    for got, k in zip(qks.values(), kernels):
      flax_fixtures.assert_close("W_QK MaxText fused", got, np_qk(
          k[:, :N], k[:, N:N + K]), rtol=1e-5, atol=1e-6)
    del params["self_attention"]["out"]
    with self.assertRaisesRegex(ValueError, "out kernel is None"):
      for_flax.qk_matrices(params)


class BonsaiTest(absltest.TestCase):

  def test_qwen3_einsum_kernels_and_norms(self):
    q_w, k_w, gq, gk = _normal(d, N, D), _normal(d, K, D), _normal(D), _normal(
        D)
    params = {"layers": {"0": {"attn": {
        "q_proj": {"kernel": q_w}, "k_proj": {"kernel": k_w},
        "v_proj": {"kernel": _normal(d, K, D)},
        "o_proj": {"kernel": _normal(N, D, d)},
        "q_norm": {"scale": gq}, "k_norm": {"scale": gk}}}}}
    with self.assertRaisesRegex(ValueError, "pass qk_norm"):
      for_flax.qk_matrices(params)
    want = np_qk(q_w * gq, k_w * gk)
    flax_fixtures.assert_close("W_QK bonsai Qwen3", for_flax.qk_matrices(
        params, qk_norm="rms")["layers/0/attn"], want, rtol=1e-5, atol=1e-6)
    rows = for_flax.spectrum_table(params, qk_norm="rms")
    flax_fixtures.assert_close("scale bonsai Qwen3", [r["scale"] for r in rows],
                               np.sum(want**2, axis=(1, 2)), rtol=1e-5)

  def test_gemma3_linear_kernels_need_num_heads(self):
    q_w, k_w, gq = _normal(d, N * D), _normal(d, K * D), _normal(D)
    params = {"attn": {"q_proj": {"kernel": q_w}, "k_proj": {"kernel": k_w},
                       "q_norm": {"scale": gq}, "k_norm": {"scale": gq}}}
    with self.assertRaisesRegex(ValueError, "pass num_heads"):
      for_flax.qk_matrices(params, qk_norm="rms_one_plus")
    got = for_flax.qk_matrices(params, num_heads=N, qk_norm="rms_one_plus")
    flax_fixtures.assert_close("W_QK bonsai Gemma 3", got["attn"], np_qk(
        q_w.reshape(d, N, D) * (1 + gq), k_w.reshape(d, K, D) * (1 + gq)),
                               rtol=1e-5, atol=1e-6)
    with self.assertRaisesRegex(ValueError, r"num_heads=\(4, 1\).*2 key"):
      for_flax.qk_matrices(params, num_heads=(N, 1), qk_norm="rms")


if __name__ == "__main__":
  absltest.main()
