"""qkspec.for_flax on Hugging Face's Flax BERT, GPT-2 and ViT.

Tiny models from configs, random weights, nothing downloaded. Each is checked
against NumPy from its raw kernels and against its own attention
probabilities (`output_attentions=True`); `flax_fixtures.assert_close` logs the
largest differences.
"""
# pylint: disable=invalid-name
import functools
import unittest

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import for_flax
from qkspec.theory import locater
import flax_fixtures

try:
  import transformers  # pylint: disable=g-import-not-at-top
except ImportError:
  transformers = None

B, T, d, H, L = 3, 5, 8, 2, 2          # batch, tokens, width, heads, layers
D = d // H
LENGTHS = np.array([5, 3, 4])          # tokens per sequence, then padding
HP = locater.LocaterHParams(kappa1=0.3, kappa2=0.7, target=0.5)


def _random_params(model, seed=0):
  """Parameters of `model`'s shapes, N(0, 0.5^2) each (no init compiled)."""
  shapes = jax.eval_shape(functools.partial(
      model.init_weights, input_shape=model.input_shape),
                          jax.random.PRNGKey(0))
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda s: jnp.asarray(
      0.5 * rng.standard_normal(s.shape), s.dtype), shapes)


def _layer_norm(x, p, eps):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean)**2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


def np_logits(x, wq, bq, wk, bk):
  """Logits [B, H, T, T] of Flax rows x [B, T, d], kernels [d, H*D]."""
  q = (x @ wq + bq).reshape(*x.shape[:2], H, D)
  k = (x @ wk + bk).reshape(*x.shape[:2], H, D)
  return np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(D)


def np_table(logits, visible, queries):
  """NumPy entropy [H] and rho [H, S] (last token query) of one layer."""
  masked = np.where(visible, logits, -1e30)
  w = np.exp(masked - masked.max(-1, keepdims=True))
  w /= w.sum(-1, keepdims=True)
  terms = np.where(visible, -w * np.log(np.where(visible, w, 1)), 0)
  ok = np.broadcast_to(queries[:, None, :], terms.shape[:3])
  entropy = (terms.sum(-1) * ok).sum((0, 2)) / ok.sum((0, 2))
  hits, seen = np.zeros(logits.shape[1::2]), np.zeros(logits.shape[1::2])
  for b in range(len(logits)):
    t = np.flatnonzero(queries[b])[-1]
    keys = np.flatnonzero(visible[b, 0, t])
    omega = logits[b, :, t, keys].T                # [H, n]
    u = (omega - omega.mean(-1, keepdims=True)) / len(keys) + 1 / len(keys)
    hits[:, keys] += (u >= 0) & (u <= 1)
    seen[:, keys] += 1
  with np.errstate(invalid="ignore"):
    return entropy, hits / seen


_needs_transformers = unittest.skipIf(
    transformers is None,
    "transformers is not installed (pip install -e '.[test]')")


class _Checks:
  """The checks every model runs; a test class says how to build and read
  its model."""
  causal = False
  padded = True           # the model takes a padding mask

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    with jax.numpy_rank_promotion("allow"):   # as the models are written
      cls.model = cls.build()
      cls.params = _random_params(cls.model)
    forward = jax.jit(lambda p, x, mask: cls.model(
        x, **({"attention_mask": mask} if cls.padded else {}), params=p,
        output_attentions=True, output_hidden_states=True))

    def run(*args):
      with jax.numpy_rank_promotion("allow"):   # as the models are written
        return forward(*args)
    cls.forward = staticmethod(run)

  def close(self, what, got, want, **tolerance):
    flax_fixtures.assert_close(f"{type(self).__name__} {what}", got, want,
                               **tolerance)

  def inputs(self, length=T):
    """Token ids [B, length] (an image [B, C, h, w] for ViT)."""
    return jnp.asarray(np.arange(B * length).reshape(B, length) % 16)

  def kernels(self, params, l):
    """NumPy (wq, bq, wk, bk) of layer l, kernels [d, H*D] as applied."""
    raise NotImplementedError

  def attention_input(self, params, hidden, l):
    """What layer l projects: its hidden state, layer-normed if Pre-LN."""
    del params, l
    return hidden

  def _np_params(self, params=None):
    return jax.tree.map(lambda a: np.asarray(a, np.float64),
                        self.params if params is None else params)

  def _np_layers(self, outputs):
    """NumPy logits [B, H, T, T] per layer, from the raw kernels."""
    params = self._np_params()
    return [np_logits(self.attention_input(
        params, np.asarray(outputs.hidden_states[l], np.float64), l),
                      *self.kernels(params, l)) for l in range(L)]

  def _visible(self, tokens):
    n = tokens.shape[1]
    visible = tokens[:, None, None, :] & tokens[:, None, :, None]
    if self.causal:
      visible = visible & np.tril(np.ones((n, n), bool))
    return visible

  def _tokens(self, lengths=LENGTHS, n=T):
    if not self.padded:
      return np.ones((B, n), bool)
    return np.arange(n)[None, :] < np.asarray(lengths)[:, None]

  def test_heads_are_never_guessed(self):
    with self.assertRaisesRegex(ValueError, "pass num_heads="):
      for_flax.qk_matrices(self.params)

  def test_qk_matrices_penalty_and_spectrum_against_numpy(self):
    heads = self.model.config.num_attention_heads
    qks = for_flax.qk_matrices(self.params, num_heads=heads)
    params, want = self._np_params(), {}
    self.assertLen(qks, L)
    for l, (path, got) in enumerate(qks.items()):
      wq, _, wk, _ = self.kernels(params, l)
      q, k = wq.reshape(d, H, D), wk.reshape(d, H, D)
      want[path] = np.stack([q[:, h] @ k[:, h].T for h in range(H)])
      self.close(f"W_QK {path}", got, want[path], atol=1e-6)
    penalty = sum(HP.kappa1 * np.sum(w**2) + HP.kappa2 * (np.trace(w)
                                                          - HP.target)**2
                  for ws in want.values() for w in ws)
    self.close("penalty", for_flax.locater_penalty(
        self.params, HP, num_heads=heads), penalty, rtol=1e-5)
    rows = for_flax.spectrum_table(self.params, num_heads=heads)
    self.assertLen(rows, L * H)
    self.close("spectrum r", [r["r"] for r in rows],
               [np.trace(w) / np.sqrt(D) for ws in want.values() for w in ws],
               rtol=1e-5, atol=1e-6)

  def test_w_qk_gives_the_models_own_attention(self):
    # log A_tj = (x_t W_QK x_j + b_q W_K^T x_j) / sqrt(D) + c_t over the
    # keys query t sees: W_QK and its heads as the model computes them.
    tokens = self._tokens()
    out = self.forward(self.params, self.inputs(), tokens.astype(np.int32))
    qks = list(for_flax.qk_matrices(
        self.params, num_heads=self.model.config.num_attention_heads
    ).values())
    params = self._np_params()
    visible = np.broadcast_to(self._visible(tokens), (B, H, T, T))
    for l in range(L):
      x = self.attention_input(
          params, np.asarray(out.hidden_states[l], np.float64), l)
      wq, bq, wk, _ = self.kernels(params, l)
      bias = np.einsum("dhk,hk->hd", wk.reshape(d, H, D), bq.reshape(H, D))
      pred = (np.einsum("bti,hij,bsj->bhts", x, np.asarray(qks[l]), x)
              + np.einsum("hd,bsd->bhs", bias, x)[:, :, None]) / np.sqrt(D)
      logp = np.log(np.maximum(np.asarray(out.attentions[l], np.float64),
                               1e-300))
      center = lambda a: np.where(visible, a - np.sum(  # noqa: E731
          np.where(visible, a, 0), -1, keepdims=True) / np.maximum(
              visible.sum(-1, keepdims=True), 1), 0)
      self.close(f"log A layer {l}", center(logp), center(pred), atol=1e-4)

  def test_from_weights_against_numpy(self):
    tokens = self._tokens()
    out = self.forward(self.params, self.inputs(), tokens.astype(np.int32))
    rows = for_flax.attention_table_from_weights(
        out.attentions, tokens.astype(np.int32) if self.padded else None)
    for l, logits in enumerate(self._np_layers(out)):
      entropy, rho = np_table(logits, self._visible(tokens), tokens)
      got = [r for r in rows if r["layer"] == l]
      self.close(f"entropy layer {l}", [r["entropy"] for r in got], entropy,
                 rtol=1e-4)
      self.close(f"rho layer {l}", [r["rho"] for r in got], rho, atol=1e-6)

  def test_padding_counts_nowhere(self):
    if not self.padded:
      self.skipTest("no padding mask")
    n = 3
    tokens = self._tokens(np.full(B, n))
    padded = self.forward(self.params, self.inputs(), tokens.astype(np.int32))
    alone = self.forward(self.params, self.inputs()[:, :n],
                     np.ones((B, n), np.int32))
    got = for_flax.attention_table_from_weights(padded.attentions, tokens)
    want = for_flax.attention_table_from_weights(alone.attentions)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g["entropy"], w["entropy"], rtol=1e-5)
      np.testing.assert_allclose(g["rho"][:n], w["rho"])

  def test_16bit_params_give_float32(self):
    low = self.model.to_bf16(self.params)
    heads = self.model.config.num_attention_heads
    for w in for_flax.qk_matrices(low, num_heads=heads).values():
      self.assertEqual(w.dtype, jnp.float32)
    self.assertEqual(for_flax.locater_penalty(low, HP, num_heads=heads).dtype,
                     jnp.float32)
    self.assertLen(for_flax.spectrum_table(low, num_heads=heads), L * H)


@_needs_transformers
class BertTest(_Checks, absltest.TestCase):

  @classmethod
  def build(cls):
    return transformers.FlaxBertModel(transformers.BertConfig(
        vocab_size=16, hidden_size=d, num_hidden_layers=L,
        num_attention_heads=H, intermediate_size=2 * d,
        max_position_embeddings=T), _do_init=False)

  def kernels(self, params, l):
    p = params["encoder"]["layer"][str(l)]["attention"]["self"]
    return (p["query"]["kernel"], p["query"]["bias"], p["key"]["kernel"],
            p["key"]["bias"])


@_needs_transformers
class GPT2Test(_Checks, absltest.TestCase):
  causal = True

  @classmethod
  def build(cls):
    return transformers.FlaxGPT2Model(transformers.GPT2Config(
        vocab_size=16, n_embd=d, n_layer=L, n_head=H, n_positions=T),
                                      _do_init=False)

  def kernels(self, params, l):
    # FlaxConv1D: kernel [3d, d], y = x kernel^T, q, k, v = split(y, 3)
    p = params["h"][str(l)]["attn"]["c_attn"]
    return p["kernel"][:d].T, p["bias"][:d], p["kernel"][d:2 * d].T, p[
        "bias"][d:2 * d]

  def attention_input(self, params, hidden, l):
    return _layer_norm(hidden, params["h"][str(l)]["ln_1"],
                       self.model.config.layer_norm_epsilon)

  def test_its_c_attn_transposed_reads_as_a_qkv_kernel(self):
    # [d, 3d] qkv kernels split q, k, v as GPT-2 does: the same W_QK.
    qkv = {str(l): {"qkv": {"kernel": self.params["h"][str(l)]["attn"][
        "c_attn"]["kernel"].T}} for l in range(L)}
    want = for_flax.qk_matrices(self.params, num_heads=H)
    got = for_flax.qk_matrices(qkv, num_heads=H)
    for l, w in enumerate(want.values()):
      np.testing.assert_allclose(got[str(l)], w, rtol=1e-6)


@_needs_transformers
class ViTTest(_Checks, absltest.TestCase):
  padded = False

  @classmethod
  def build(cls):
    return transformers.FlaxViTModel(transformers.ViTConfig(
        image_size=4, patch_size=2, num_channels=1, hidden_size=d,
        num_hidden_layers=L, num_attention_heads=H,
        intermediate_size=2 * d), _do_init=False)

  def inputs(self, length=T):
    del length           # 4 patches and the CLS token: T = 5
    return jnp.asarray(np.random.default_rng(1).standard_normal(
        (B, 1, 4, 4)), jnp.float32)

  def kernels(self, params, l):
    p = params["encoder"]["layer"][str(l)]["attention"]["attention"]
    return (p["query"]["kernel"], p["query"]["bias"], p["key"]["kernel"],
            p["key"]["bias"])

  def attention_input(self, params, hidden, l):
    return _layer_norm(hidden, params["encoder"]["layer"][str(l)][
        "layernorm_before"], self.model.config.layer_norm_eps)

  def test_attention_table_points_to_from_weights(self):
    # its attention is its own, not Flax's: attention_table sees no layer
    pixels = jnp.transpose(self.inputs(), (0, 2, 3, 1))
    with jax.numpy_rank_promotion("allow"):
      with self.assertRaisesRegex(ValueError,
                                  "attention_table_from_weights"):
        for_flax.attention_table(self.model.module.apply,
                                 {"params": self.params}, pixels)


if __name__ == "__main__":
  absltest.main()
