"""qkspec.training.model: shapes, causality, sown logits vs W_QK."""
# pylint: disable=invalid-name
import math

from absl.testing import absltest
from absl.testing import parameterized
import chex
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import defaults as common
from qkspec.theory import spectrum
from qkspec.training import model as model_lib
import testutil


B, T, d, V = 2, 8, 16, 50


def _lm_model_config(**kw):
  m = common.lm_config().model
  m.d_model, m.ffn_dim = d, d
  m.update(kw)
  return m


def _zero_qk_biases(params):
  def f(path, x):
    names = [getattr(p, "key", "") for p in path]
    if names[-1] == "bias" and ("query" in names or "key" in names):
      return jnp.zeros_like(x)
    return x
  return jax.tree_util.tree_map_with_path(f, params)


def _sown(inter, layer, name):
  block = inter["decoder"][f"block_{layer}"]
  return (block["attn"][name] if name in ("logits", "probs")
          else block[name])[0]


class ModelTest(parameterized.TestCase):

  @parameterized.parameters(("post", 1), ("pre", 2), ("none", 1))
  def test_lm_shapes_and_causality(self, norm, heads):
    m = model_lib.make_model(_lm_model_config(norm=norm, num_heads=heads,
                                              num_layers=2), "lm", V)
    tokens = jax.random.randint(jax.random.key(0), (B, T), 0, V)
    params = m.init(jax.random.key(1), tokens)["params"]
    logits = m.apply({"params": params}, tokens)
    chex.assert_shape(logits, (B, T, V))
    chex.assert_tree_all_finite(logits)
    chex.assert_shape(model_lib.qk_matrices(params), (2, heads, d, d))
    # Changing tokens after t leaves logits up to t bit-identical.
    t = 4
    other = tokens.at[:, t + 1:].set((tokens[:, t + 1:] + 7) % V)
    np.testing.assert_array_equal(
        m.apply({"params": params}, other)[:, :t + 1], logits[:, :t + 1])

  @parameterized.parameters("factored", "joint")
  def test_gradient_of_past_outputs_wrt_future_inputs_is_zero(self, qk):
    if qk == "joint":
      testutil.skip_unless_slow(self, "causality again with a joint W_QK")
    m = model_lib.Decoder(model_lib.ModelConfig(
        num_layers=2, num_heads=2, qk_param=qk, causal=True, ffn_dim=d,
        norm="post"))
    x = jax.random.normal(jax.random.key(0), (1, T, d))
    params = m.init(jax.random.key(1), x)["params"]
    jac = jax.jit(jax.jacrev(lambda x: m.apply({"params": params}, x)))(x)
    jac_TxTxdd = jnp.einsum("atibjd->tjid", jac).reshape(T, T, -1)
    for t in range(T):
      np.testing.assert_array_equal(jac_TxTxdd[t, t + 1:], 0.0)
      self.assertGreater(float(jnp.abs(jac_TxTxdd[t, 0]).max()), 0.0)

  @parameterized.parameters(("factored", 1), ("factored", 2), ("joint", 1),
                            ("joint", 2))
  def test_sown_logits_equal_x_wqk_x_over_sqrt_D(self, qk, heads):
    D = d // heads
    m = model_lib.Decoder(model_lib.ModelConfig(
        num_layers=2, num_heads=heads, qk_param=qk, causal=True, ffn_dim=d,
        norm="pre"))
    x = jax.random.normal(jax.random.key(2), (B, T, d))
    params = _zero_qk_biases(m.init(jax.random.key(3), x)["params"])
    _, state = m.apply({"params": params}, x, mutable=["intermediates"])
    inter = {"decoder": state["intermediates"]}
    w_qk = model_lib.qk_matrices({"decoder": params})
    # Attention inputs: layer 0 sees LN(x), layer 1 sees LN(block_0 output).
    ln = lambda p, h: model_lib.nn.LayerNorm(epsilon=1e-5).apply(  # noqa: E731
        {"params": p}, h)
    h0 = ln(params["block_0"]["attn_ln"], x)
    h1 = ln(params["block_1"]["attn_ln"], _sown(inter, 0, "out"))
    for layer, h in enumerate((h0, h1)):
      want = jnp.einsum("bti,hij,bsj->bhts", h, w_qk[layer], h) / math.sqrt(D)
      got = _sown(inter, layer, "logits")
      np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
      probs = _sown(inter, layer, "probs")
      np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-6)
      np.testing.assert_array_equal(
          jnp.where(model_lib.causal_mask(T), 0.0, probs), 0.0)

  def test_temperature_none_is_sqrt_head_width(self):
    # H = 2: lambda = sqrt(D) = sqrt(d / 2), not sqrt(d). None (the
    # default) and sqrt(D) give identical logits; None's lambda is sqrt(D)
    # in float32 (`softmax.temperature`), the models' precision.
    D = d // 2
    tokens = jax.random.randint(jax.random.key(11), (B, T), 0, V)
    logits = {}
    for t in (None, math.sqrt(D), 2.0):
      mc = _lm_model_config(num_heads=2, temperature=t)
      self.assertEqual(model_lib.attention_temperature(mc),
                       float(np.float32(math.sqrt(D))) if t is None else t)
      m = model_lib.make_model(mc, "lm", V)
      params = m.init(jax.random.key(12), tokens)["params"]
      logits[t] = m.apply({"params": params}, tokens)
    self.assertIsNone(_lm_model_config().temperature)
    np.testing.assert_array_equal(logits[None], logits[math.sqrt(D)])
    self.assertGreater(float(jnp.abs(logits[None] - logits[2.0]).max()), 0.0)

  def test_theory_model_matches_paper_block(self):
    c = common.theory_config()
    c.model.d_model, c.model.ffn_dim, c.model.activation = 8, 8, "relu"
    m = model_lib.make_model(c.model, "theory")
    x = jax.random.normal(jax.random.key(4), (B, T, 8))
    p = m.init(jax.random.key(5), x)["params"]
    out = m.apply({"params": p}, x)
    blk = p["decoder"]["block_0"]
    w_qk = blk["attn"]["w_qk"][0]
    a = jax.nn.softmax(jnp.einsum("bti,ij,bsj->bts", x, w_qk, x) / math.sqrt(8))
    u = jnp.einsum("bts,bsi->bti", a, x @ blk["attn"]["value"]["kernel"][:, 0])
    z = u + x                                                  # Z = U + X
    want = jax.nn.relu(z @ blk["ffn1"]["kernel"]) @ blk["ffn2"]["kernel"] + z
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)

  def test_qk_matrices_is_each_layers_product_and_its_gradient(self):
    c = common.lm_config()
    common.synthetic_data(c)
    c.model.update(d_model=d, ffn_dim=d, num_layers=3, num_heads=2)
    m = model_lib.make_model(c.model, "lm", V)
    params = m.init(jax.random.key(6), jnp.zeros((B, T), jnp.int32))["params"]

    def per_layer(p):                     # one product per layer
      return jnp.stack([spectrum.qk_from_kernels(a["query"]["kernel"],
                                                 a["key"]["kernel"])
                        for a in model_lib.attention_params(p)])
    np.testing.assert_allclose(model_lib.qk_matrices(params),
                               per_layer(params), rtol=1e-6, atol=0)
    # the layers' order, and a weight per layer and head in the gradient
    wts = jnp.arange(1.0, 7.0).reshape(3, 2, 1, 1)
    loss = lambda f: lambda p: jnp.sum(wts * f(p) ** 2)  # noqa: E731
    got = jax.grad(loss(model_lib.qk_matrices))(params)
    want = jax.grad(loss(per_layer))(params)
    chex.assert_trees_all_close(got, want, rtol=1e-6, atol=1e-9)

  def test_bfloat16_compute_keeps_float32_params(self):
    m = model_lib.make_model(_lm_model_config(), "lm", V, dtype=jnp.bfloat16)
    tokens = jnp.zeros((B, T), jnp.int32)
    params = m.init(jax.random.key(0), tokens)["params"]
    self.assertTrue(all(x.dtype == jnp.float32
                        for x in jax.tree.leaves(params)))
    logits = jax.jit(m.apply)({"params": params}, tokens)
    self.assertEqual(logits.dtype, jnp.float32)
    chex.assert_tree_all_finite(logits)

  def test_sinusoidal_positions_match_fairseq_layout(self):
    emb = model_lib.sinusoidal_positions(5, 8)
    half = 4
    freq = np.exp(np.arange(half) * -(math.log(10000.0) / (half - 1)))
    np.testing.assert_allclose(emb[0, :half], np.sin(2 * freq), rtol=1e-6)
    np.testing.assert_allclose(emb[3, half:], np.cos(5 * freq), rtol=1e-6)


class OptionsTest(absltest.TestCase):

  def test_every_config_option_has_an_implementation(self):
    x = jnp.linspace(-2.0, 2.0, 5)
    np.testing.assert_allclose(model_lib.ACTIVATIONS["identity"](x), x)
    np.testing.assert_allclose(model_lib.ACTIVATIONS["relu"](x),
                               np.maximum(x, 0.0))


if __name__ == "__main__":
  absltest.main()
