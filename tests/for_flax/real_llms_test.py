"""qkspec.for_flax on tiny random models built by gemma's and MaxText's code.

Gemma 2 (grouped-query, soft-capped, local and global layers), Gemma 3
(QK-norm, multi-query) and Gemma 4 (QK-norm, unscaled logits, a global
layer of its own head width with k = v and partial RoPE) from gemma 4.0.1;
Llama (grouped-query, scanned and not) and Qwen3 (QK-norm, scanned) from
MaxText 0.2.5; their norms' gains moved off their initial values. Both
libraries need Python >= 3.12 (gemma also `sentencepiece==0.2.1`), so this
runs where they are installed:

  QKSPEC_SLOW=1 PYTHONPATH=tests python tests/for_flax/real_llms_test.py

For each attention layer, NumPy reads the raw kernels and gains as the
library's source does and recomputes, from the attention input the model
ran on, the model's own probabilities (gemma sows them; MaxText's logits
are taken where its AttentionOp computes them), with its RoPE, QK-norm,
query scale, soft cap and window. Then `qk_matrices`, `locater_penalty` and
`spectrum_table` (at the model's own logit scale) are checked against NumPy
from the same kernels, and `attention_table_from_weights` of the model's
own probabilities against NumPy from its logits. Elsewhere it skips;
llm_layouts_test checks the same parameter trees in the quick suite.
"""
# pylint: disable=invalid-name,g-import-not-at-top
import importlib.util
import unittest

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import for_flax
from qkspec.theory import locater
import flax_fixtures
import testutil

HP = locater.LocaterHParams(kappa1=0.3, kappa2=0.7, target=0.5)
B, T, W = 2, 12, 4          # batch, tokens, the local layers' window
_MISSING = [m for m in ("gemma", "maxtext") if importlib.util.find_spec(m)
            is None]


def np_rope(x, base, scale=1.0, proportion=1.0):
  """gemma's apply_rope and MaxText's RotaryEmbedding: half-split pairs,
  the first `proportion` of them rotated."""
  D = x.shape[-1]
  rotated = int(proportion * D // 2)
  timescale = np.concatenate([base ** (2.0 * np.arange(rotated) / D),
                              np.full(D // 2 - rotated, np.inf)])
  angle = (np.arange(x.shape[1])[:, None] / timescale / scale)[None, :, None]
  x1, x2 = x[..., :D // 2], x[..., D // 2:]
  return np.concatenate([x1 * np.cos(angle) - x2 * np.sin(angle),
                         x2 * np.cos(angle) + x1 * np.sin(angle)], axis=-1)


def np_logits(x, wq, wk, gains, *, mult, cap, rope, eps=1e-6):
  """Logits [B, N, T, S] of attention input x [B, T, d], kernels [d, N, D]
  and [d, K, D], RMSNorm gains (query, key) or None, `rope` (base, scale,
  proportion)."""
  q, k = np.einsum("btd,dnh->btnh", x, wq), np.einsum("bsd,dkh->bskh", x, wk)
  if gains is not None:
    q, k = (v / np.sqrt(np.mean(v**2, -1, keepdims=True) + eps) * g
            for v, g in ((q, gains[0]), (k, gains[1])))
  q, k = np_rope(q, *rope) * mult, np_rope(k, *rope)
  k = np.repeat(k, q.shape[2] // k.shape[2], axis=2)
  logits = np.einsum("btnh,bsnh->bnts", q, k)
  return logits if cap is None else cap * np.tanh(logits / cap)


def np_softmax(logits, visible):
  masked = np.where(visible, logits, -np.inf)
  p = np.exp(masked - masked.max(-1, keepdims=True))
  return p / p.sum(-1, keepdims=True)


def _visible(window):
  distance = np.arange(T)[:, None] - np.arange(T)[None]
  return (distance >= 0) & ((distance < window) if window else True)


def _perturbed(variables, names):
  """`variables` with the norms `names`' scales moved by N(0, 0.3^2)."""
  def move(path, leaf):
    keys = [getattr(p, "key", None) for p in path]
    if any(n in keys for n in names) and keys[-1] == "scale":
      return leaf + 0.3 * jax.random.normal(jax.random.key(len(keys)),
                                            leaf.shape)
    return leaf
  return jax.tree_util.tree_map_with_path(move, variables)


@unittest.skipIf(_MISSING, f"{' and '.join(_MISSING)} not installed (Python "
                 ">= 3.12); llm_layouts_test checks their parameter trees")
@testutil.slow("builds tiny gemma and MaxText models; llm_layouts_test "
               "checks their parameter trees")
class RealLLMsTest(absltest.TestCase):

  def check_layer(self, name, params, path, wq, wk, gains, probs, logits,
                  temperature, window):
    """`path`'s W_QK, penalty and spectrum against NumPy from kernels
    [d, N, D], [d, K, D] and RMSNorm gains, and the table of the model's
    probabilities [B, N, T, S] against NumPy from its logits."""
    wq, wk = np.asarray(wq, np.float64), np.asarray(wk, np.float64)
    if gains is not None:
      wq, wk = wq * gains[0], wk * gains[1]
    want = flax_fixtures.np_qk(wq, wk)
    flax_fixtures.assert_close(f"W_QK {name}", for_flax.qk_matrices(params)[
        path], want, rtol=1e-5, atol=1e-6)
    spectrum = flax_fixtures.np_spectrum(want, temperature)
    rows = [r for r in for_flax.spectrum_table(
        params, temperature=temperature) if r["path"] == path]
    for column in ("scale", "r", "eta"):
      flax_fixtures.assert_close(f"{column} {name}",
                                 [r[column] for r in rows], spectrum[column],
                                 rtol=1e-5)
    visible = np.broadcast_to(_visible(window), (B, 1, T, T))
    table = for_flax.attention_table_from_weights([probs], visible)
    flax_fixtures.assert_close(
        f"entropy {name}", [r["entropy"] for r in table],
        flax_fixtures.np_entropy(probs, visible), rtol=1e-4)
    flax_fixtures.assert_close(f"rho {name}", [r["rho"] for r in table],
                               flax_fixtures.np_rho(logits, visible),
                               atol=1e-7)
    return want

  def check_penalty(self, name, params, w_qks):
    """locater_penalty against NumPy from every layer's W_QK [N, d, d]."""
    flax_fixtures.assert_close(
        f"penalty {name}", for_flax.locater_penalty(params, HP),
        flax_fixtures.np_penalty([w for ws in w_qks for w in ws], HP),
        rtol=1e-5)

  def _gemma_layers(self, version, model, config, norms, scalar):
    """Checks each layer of a gemma `model` (norms: the query/key norm
    names and the offset of their gains; scalar: the query's factor)."""
    tokens = jax.random.randint(jax.random.key(0), (B, T), 1, 64)
    variables = _perturbed(model.init(jax.random.key(1), tokens), norms[:2])
    _, inter = model.apply(variables, tokens, capture_intermediates=True,
                           mutable=["intermediates"])
    with self.assertRaisesRegex(ValueError, "no attention layer ran.*"
                                "attention_table_from_weights"):
      for_flax.attention_table(model.apply, variables, tokens)
    w_qks = []
    for i, kind in enumerate(config.attention_types):
      layer, is_local = f"layer_{i}", kind.name == "LOCAL_SLIDING"
      attn = variables["params"][layer]["attn"]
      wq = np.asarray(attn["q_einsum"]["w"]).transpose(1, 0, 2)
      wk = np.asarray(attn["kv_einsum"]["w"][0] if "kv_einsum" in attn else
                      attn["k_einsum"]["w"]).transpose(1, 0, 2)
      gains = tuple(norms[2] + np.asarray(attn[n]["scale"])
                    for n in norms[:2]) if norms[0] in attn else None
      where = "local" if is_local else "global"
      proportion = getattr(config, f"{where}_rope_proportion", None)
      rope = (getattr(config, f"{where}_base_frequency"),
              getattr(config, f"{where}_scale_factor"), proportion or 1.0)
      x = np.asarray(inter["intermediates"][layer]["pre_attention_norm"][
          "__call__"][0])
      logits = np_logits(x, wq, wk, gains, mult=scalar, rope=rope,
                         cap=config.attn_logits_soft_cap)
      window = W if is_local else None
      own = np.swapaxes(np.asarray(inter["intermediates"][layer]["attn"][
          "attention_weights"]["__call__"][0]), 1, 2)    # [B, T, N, S]
      flax_fixtures.assert_close(f"{version} {layer} probabilities", own,
                                 np_softmax(logits, _visible(window)),
                                 atol=1e-5)
      w_qks.append(self.check_layer(f"{version} {layer}", variables,
                                    f"{layer}/attn", wq, wk, gains, own,
                                    logits, 1 / scalar, window))
    self.check_penalty(version, variables, w_qks)

  def test_gemma(self):
    from gemma import gm
    from gemma.gm.nn import _config, _modules
    from gemma.gm.nn.gemma4 import _config as config4
    from gemma.gm.nn.gemma4 import _modules as modules4
    from gemma.gm.nn.gemma4 import _transformer as transformer4
    common = dict(num_embed=64, embed_dim=32, hidden_dim=64, num_heads=4,
                  head_dim=8, use_post_attn_norm=True, use_post_ffw_norm=True,
                  sliding_window_size=W)
    kinds = (_modules.AttentionType.LOCAL_SLIDING,
             _modules.AttentionType.GLOBAL)
    by_sqrt_d = dict(attention_types=kinds, query_pre_attn_norm=(
        _config.QueryPreAttentionNormalisation.BY_ONE_OVER_SQRT_HEAD_DIM))
    for version, kwargs in {
        "Gemma 2": dict(num_kv_heads=2, final_logit_softcap=30.0,
                        attn_logits_soft_cap=20.0),
        "Gemma 3": dict(num_kv_heads=1, use_qk_norm=True,
                        final_logit_softcap=None, attn_logits_soft_cap=None,
                        transpose_gating_einsum=True,
                        global_base_frequency=1_000_000,
                        global_scale_factor=8.0)}.items():
      config = _config.TransformerConfig(**common, **by_sqrt_d, **kwargs)
      model = gm.nn.Transformer(config=config, dtype=jnp.float32,
                                tokens="batch.tokens")
      self._gemma_layers(version, model, config,
                         ("_query_norm", "_key_norm", 1.0),
                         config.query_pre_attn_scalar())
    # Gemma 4: scale norms, unscaled logits, a global layer with one key
    # head of its own width (k = v) and RoPE on a quarter of its features
    config = config4.TransformerConfig(
        **common, num_kv_heads=2, final_logit_softcap=30.0,
        attention_types=(modules4.AttentionType.LOCAL_SLIDING,
                         modules4.AttentionType.GLOBAL),
        num_global_kv_heads=1, global_key_size=16, k_eq_v_global=True,
        global_rope_proportion=0.25, local_rope_proportion=1.0,
        global_base_frequency=1_000_000)
    model = transformer4.Transformer(config=config, dtype=jnp.float32,
                                     tokens="batch.tokens")
    self._gemma_layers("Gemma 4", model, config,
                       ("query_norm", "key_norm", 0.0), 1.0)

  def test_maxtext(self):
    from flax import linen as nn
    from maxtext.configs import pyconfig
    from maxtext.layers import attention_op, attentions
    from maxtext.utils import maxtext_utils, model_creation_utils
    base_yml = pyconfig.__file__.rsplit("/", 1)[0] + "/base.yml"
    common = dict(
        run_name="qkspec", base_output_directory="/tmp/qkspec_maxtext",
        enable_checkpointing=False, dataset_type="synthetic", hardware="cpu",
        attention="dot_product", dtype="float32", weight_dtype="float32",
        per_device_batch_size=B, max_target_length=T,
        max_prefill_predict_length=T, skip_jax_distributed_system=True,
        log_config=False, base_emb_dim=32, base_num_query_heads=4,
        base_num_kv_heads=2, head_dim=8, base_mlp_dim=64,
        base_num_decoder_layers=2, vocab_size=64)
    models = {"Llama scanned": dict(decoder_block="llama2", scan_layers=True),
              "Llama": dict(decoder_block="llama2", scan_layers=False),
              "Qwen3 scanned": dict(decoder_block="qwen3", scan_layers=True,
                                    use_qk_norm=True,
                                    rope_max_timescale=1_000_000)}
    op, attention = attention_op.AttentionOp, attentions.Attention
    originals = (op.compute_local_attention, attention.query_projection)
    seen = []

    def logits_hook(self, attn_weights, *args, **kwargs):
      jax.debug.callback(lambda w: seen.append(("logits", np.asarray(w))),
                         attn_weights, ordered=True)
      return originals[0](self, attn_weights, *args, **kwargs)

    def input_hook(self, inputs_q, *args, **kwargs):
      jax.debug.callback(lambda x: seen.append(("x", np.asarray(x))),
                         inputs_q, ordered=True)
      return originals[1](self, inputs_q, *args, **kwargs)

    tokens = jax.random.randint(jax.random.key(0), (B, T), 1, 64)
    positions = jnp.broadcast_to(jnp.arange(T), (B, T))
    for name, kwargs in models.items():
      config = pyconfig.initialize(["", base_yml], **common, **kwargs)
      mesh = maxtext_utils.get_mesh_from_config(config)
      model = model_creation_utils.from_config(config, mesh=mesh)
      with jax.set_mesh(mesh):
        variables = nn.unbox(model.init(
            {"params": jax.random.key(1), "dropout": jax.random.key(2)},
            tokens, positions, jnp.ones_like(tokens), enable_dropout=False))
      variables = _perturbed(variables, ("query_norm", "key_norm"))
      seen.clear()
      op.compute_local_attention, attention.query_projection = (
          logits_hook, input_hook)
      try:
        with jax.set_mesh(mesh):
          model.apply(variables, tokens, positions, jnp.ones_like(tokens),
                      enable_dropout=False)
        jax.effects_barrier()
      finally:
        op.compute_local_attention, attention.query_projection = originals
      with self.assertRaisesRegex(ValueError, "no attention layer ran.*"
                                  "attention_table_from_weights"), (
                                      jax.set_mesh(mesh)):
        for_flax.attention_table(model.apply, variables, tokens, positions,
                                 jnp.ones_like(tokens), enable_dropout=False)
      inputs = [v for k, v in seen if k == "x"]
      own_logits = [v for k, v in seen if k == "logits"]
      decoder = variables["params"]["decoder"]
      mult = config.head_dim ** -0.5 if kwargs["decoder_block"] == "qwen3" \
          else 1.0
      w_qks = []
      for i in range(config.num_decoder_layers):
        stack = decoder["layers" if config.scan_layers else f"layers_{i}"][
            "self_attention"]
        take = ((lambda a, i=i: np.take(np.asarray(a), i, axis=1))
                if config.scan_layers else np.asarray)
        wq, wk = take(stack["query"]["kernel"]), take(stack["key"]["kernel"])
        gains = (take(stack["query_norm"]["scale"]),
                 take(stack["key_norm"]["scale"])) if (
                     "query_norm" in stack) else None
        logits = np_logits(inputs[i], wq, wk, gains, mult=mult, cap=None,
                           rope=(config.rope_max_timescale, 1.0, 1.0),
                           eps=config.normalization_layer_epsilon)
        own = own_logits[i].reshape(B, -1, T, T)   # [B, K, G, T, S]
        visible = _visible(None)
        flax_fixtures.assert_close(f"{name} layer {i} logits",
                                   np.where(visible, own, 0),
                                   np.where(visible, logits, 0), rtol=1e-4,
                                   atol=1e-4)
        path = (f"decoder/layers/self_attention/{i}" if config.scan_layers
                else f"decoder/layers_{i}/self_attention")
        w_qks.append(self.check_layer(
            f"{name} layer {i}", variables, path, wq, wk, gains,
            np_softmax(own, visible), logits, 1 / mult, None))
      self.check_penalty(name, variables, w_qks)


if __name__ == "__main__":
  absltest.main()
