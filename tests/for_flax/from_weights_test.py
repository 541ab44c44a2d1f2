"""Tests for qkspec.for_flax.from_weights: tables from attention weights."""
from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import for_flax
import flax_fixtures

T, H = flax_fixtures.FLAX_T, flax_fixtures.FLAX_H
LENGTHS = np.array([5, 3, 4])
LinenNet, _ = flax_fixtures.flax_nets()


def _tokens(lengths):
  return np.arange(T)[None, :] < np.asarray(lengths)[:, None]


def _sown(x, mask):
  """The attention weights [B, H, T, T] per layer LinenNet sows, and its
  attention_table rows."""
  model = LinenNet()
  variables = model.init(jax.random.key(0), x)
  _, sown = model.apply(variables, x, mask=mask, mutable=["intermediates"])
  weights = [sown["intermediates"][f"attn_{l}"]["attention_weights"][0]
             for l in range(2)]
  return weights, for_flax.attention_table(model.apply, variables, x,
                                           mask=mask)


def _pair(tokens):
  return tokens[:, None, :, None] & tokens[:, None, None, :]


class FromWeightsTest(absltest.TestCase):

  def test_against_numpy_from_the_logits(self):
    # Cross-attention shapes (T = 2 queries, S = 4 keys): the mask hides
    # keys only; rho from the logits themselves, not the log-probabilities.
    B, T_, S = 3, 2, 4
    logits = np.asarray(jax.random.normal(jax.random.key(3), (B, H, T_, S)),
                        np.float64) * 3
    keys = np.array([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]], bool)
    masked = np.where(keys[:, None, None, :], logits, -np.inf)
    probs = np.exp(masked - masked.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    rows = for_flax.attention_table_from_weights([probs], keys.astype(int))
    self.assertEqual([(r["layer"], r["head"]) for r in rows],
                     [(0, h) for h in range(H)])
    ent = -np.sum(np.where(probs > 0, probs * np.log(np.where(
        probs > 0, probs, 1)), 0), -1).mean((0, 2))
    np.testing.assert_allclose([r["entropy"] for r in rows], ent, rtol=1e-5)
    hits, seen = np.zeros((H, S)), np.zeros((H, S))
    for b in range(B):
      n = keys[b].sum()
      omega = logits[b, :, -1, :n]                    # [H, n]
      u = (omega - omega.mean(-1, keepdims=True)) / n + 1 / n
      hits[:, :n] += (u >= 0) & (u <= 1)
      seen[:, :n] += 1
    np.testing.assert_allclose([r["rho"] for r in rows], hits / seen)

  def test_per_query_masks_and_gemmas_layout_against_numpy(self):
    # A causal sliding window per head (widths 2 and 4) over right-padded
    # sequences, given as [B, H, T, S] and, for one width, [B, T, S];
    # probabilities [B, T, H, S] as gemma returns them.
    B, S = len(LENGTHS), T
    logits = np.asarray(jax.random.normal(jax.random.key(4), (B, H, T, S)),
                        np.float64) * 3
    distance = np.arange(T)[:, None] - np.arange(S)[None]
    window = np.stack([(distance >= 0) & (distance < w) for w in (2, 4)])
    visible = window[None] & _tokens(LENGTHS)[:, None, None, :]
    masked = np.where(visible, logits, -1e30)   # (a padded query: uniform)
    probs = np.exp(masked - masked.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    entropy = flax_fixtures.np_entropy(probs, visible)
    rho = flax_fixtures.np_rho(logits, visible)
    for mask, layout in ((visible, "BHTS"), (visible, "BTHS")):
      weights = probs if layout == "BHTS" else np.swapaxes(probs, 1, 2)
      rows = for_flax.attention_table_from_weights([weights], mask, layout)
      flax_fixtures.assert_close(f"entropy {layout}", [r["entropy"]
                                                       for r in rows],
                                 entropy, rtol=1e-5)
      flax_fixtures.assert_close(f"rho {layout}", [r["rho"] for r in rows],
                                 rho, atol=1e-7)
    self.assertTrue(np.isnan(rows[0]["rho"][0]), "key 0 is out of window")
    per_layer = for_flax.attention_table_from_weights(
        [probs[:, :1], probs[:, 1:]], [visible[:, 0], visible[:, 1:]])
    np.testing.assert_allclose([r["rho"] for r in per_layer], rho)
    with self.assertRaisesRegex(ValueError, "mask lists 1 masks for 2"):
      for_flax.attention_table_from_weights([probs] * 2, [visible])

  def test_equals_attention_table_on_the_same_model(self):
    x, tokens = flax_fixtures.flax_inputs(), _tokens(LENGTHS)
    mask = _pair(tokens) & np.tril(np.ones((T, T), bool))
    weights, table = _sown(x, mask)
    rows = for_flax.attention_table_from_weights(weights, tokens)
    self.assertLen(rows, len(table))
    for r, t in zip(rows, table):
      self.assertEqual((f"attn_{r['layer']}", r["head"]),
                       (t["path"], t["head"]))
      np.testing.assert_allclose(r["entropy"], t["entropy"], rtol=1e-5)
      np.testing.assert_allclose(r["rho"], t["rho"])

  def test_padding_counts_nowhere(self):
    n, x = 3, flax_fixtures.flax_inputs()
    tokens = _tokens(np.full(len(x), n))
    padded, _ = _sown(x, _pair(tokens))
    alone, _ = _sown(x[:, :n], None)
    got = for_flax.attention_table_from_weights(padded, tokens)
    want = for_flax.attention_table_from_weights(alone)
    for g, w in zip(got, want):
      np.testing.assert_allclose(g["entropy"], w["entropy"], rtol=1e-5)
      np.testing.assert_allclose(g["rho"][:n], w["rho"])
      self.assertTrue(np.all(np.isnan(g["rho"][n:])))
    unmasked = for_flax.attention_table_from_weights(padded)
    self.assertNotAlmostEqual(unmasked[0]["entropy"], want[0]["entropy"],
                              places=3)

  def test_16bit_weights_give_float32(self):
    x = flax_fixtures.flax_inputs()
    weights, _ = _sown(x, None)
    want = for_flax.attention_table_from_weights(weights)
    for dtype in (jnp.bfloat16, jnp.float16):
      got = for_flax.attention_table_from_weights(
          [w.astype(dtype) for w in weights])
      np.testing.assert_allclose([r["entropy"] for r in got],
                                 [r["entropy"] for r in want], rtol=1e-2)
      self.assertTrue(all(isinstance(r["entropy"], float) for r in got))

  def test_what_cannot_be_right_is_refused(self):
    weights, _ = _sown(flax_fixtures.flax_inputs(), None)
    logits = [jnp.log(w) + 1.0 for w in weights]
    for args, msg in (
        ((weights[0],), "sequence of"),
        (([weights[0][0]],), r"\[B, H, T, S\]"),
        (([jnp.exp(w) for w in logits],), "not logits"),
        ((logits,), r"must be non-negative \(probabilities\)"),
        ((weights, np.ones((3, T + 1))), r"mask must be \[B, S\]"),
        ((weights, None, "BSTH"), "layout must be one of")):
      with self.assertRaisesRegex(ValueError, msg):
        for_flax.attention_table_from_weights(*args)
    with self.assertRaisesRegex(ValueError, "outside jax.jit"):
      jax.jit(for_flax.attention_table_from_weights)(weights)


if __name__ == "__main__":
  absltest.main()
