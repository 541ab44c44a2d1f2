"""Tests for qkspec.for_flax.attention: the attention table against NumPy."""
from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import for_flax
import flax_fixtures
import testutil


T, d, H, L = (flax_fixtures.FLAX_T, flax_fixtures.FLAX_D, flax_fixtures.FLAX_H,
              flax_fixtures.FLAX_L)
LENGTHS = np.array([5, 3, 4])           # tokens per sequence, then padding
LinenNet, NnxNet = flax_fixtures.flax_nets()
LinenScan, LinenRemat, NnxScan = flax_fixtures.flax_stacks()
_inputs, _np = flax_fixtures.flax_inputs, flax_fixtures.float64_tree
np_queries, np_entropy, np_rho = (flax_fixtures.np_queries,
                                   flax_fixtures.np_entropy,
                                   flax_fixtures.np_rho)
CAUSAL = np.tril(np.ones((T, T), bool))


def _tokens(lengths=LENGTHS):
  """Bool [B, T]: a token, not padding."""
  return np.arange(T)[None, :] < lengths[:, None]


def _pair_mask(lengths=LENGTHS):
  """Bool [B, 1, T, T]: both positions tokens (nn.make_attention_mask)."""
  real = _tokens(lengths)
  return real[:, None, :, None] & real[:, None, None, :]


def _key_mask(lengths=LENGTHS):
  """Bool [B, 1, 1, T]: the key is a token (padded queries not marked)."""
  return _tokens(lengths)[:, None, None, :]


def np_residual(out, tokens):
  """Dong's relative residual of each sequence's token rows, batch mean."""
  ratios = []
  for o, tok in zip(out, tokens):
    o = o[tok]
    ratios.append(np.linalg.norm(o - o.mean(0)) / np.linalg.norm(o))
  return np.mean(ratios)


def _check_rows(test, rows, params, names, x, visible, transform=None,
                label=""):
  """The attention table equals the NumPy forward pass layer by layer
  (`label` names the case in the closeness log)."""
  for name in names:
    heads = params[name]["query"]["kernel"].shape[-2]
    visible = np.broadcast_to(visible, (len(x), heads, T, T))
    tokens = np_queries(visible).any(1)
    logits, w, out = flax_fixtures.np_attention(params[name], x, visible,
                                                transform)
    got = [r for r in rows if r["path"] == name]
    test.assertEqual([r["head"] for r in got], list(range(heads)))
    flax_fixtures.assert_close(f"entropy {label}{name}",
                               [r["entropy"] for r in got],
                               np_entropy(w, visible), rtol=1e-4)
    flax_fixtures.assert_close(f"rho {label}{name}", [r["rho"] for r in got],
                               np_rho(logits, visible), atol=1e-6)
    flax_fixtures.assert_close(f"rank residual {label}{name}",
                               [r["rank_residual"] for r in got],
                               [np_residual(out, tokens)] * heads, rtol=1e-4)
    x = x + out


def _by_path(rows):
  return {(r["path"], r["head"]): r for r in rows}


class AttentionTableTest(parameterized.TestCase):

  @parameterized.parameters(True, False)
  def test_linen_against_numpy_and_sown_weights(self, use_bias):
    x, model = _inputs(), LinenNet(use_bias)
    variables = model.init(jax.random.key(0), x)
    mask = _pair_mask() & CAUSAL
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
    mask = _pair_mask()
    visible = mask & CAUSAL
    before = nnx.to_pure_dict(nnx.state(model))
    rows = for_flax.attention_table(lambda m, x: m(x, mask=mask), model, x)
    same = jax.tree.map(np.array_equal, before,
                        nnx.to_pure_dict(nnx.state(model)))
    self.assertTrue(all(jax.tree.leaves(same)), "the model is unchanged")
    self.assertIs(type(model.layers[0]), nnx.MultiHeadAttention)
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

  @parameterized.named_parameters(
      ("linen_pair_mask", "linen", _pair_mask),
      ("linen_key_mask", "linen", _key_mask),
      ("nnx_causal_key_mask", "nnx", _key_mask))
  def test_padding_counts_nowhere(self, kind, make_mask):
    if make_mask is _key_mask and kind == "linen":
      testutil.skip_unless_slow(self, "linen with a key-only mask; "
                                "nnx_causal_key_mask checks such a mask, "
                                "linen_pair_mask linen's padding")
    # Right-padded to T, with its mask, a batch measures as it does unpadded
    # (its sequences are of one length n, so unpadded is one array).
    n, x = 3, _inputs()
    lengths = np.full(len(x), n)
    if kind == "linen":
      model = LinenNet()
      variables = model.init(jax.random.key(0), x)
      run = lambda x, **kw: for_flax.attention_table(  # noqa: E731
          model.apply, variables, x, **kw)
    else:
      variables = NnxNet(nnx.Rngs(0))
      run = lambda x, **kw: for_flax.attention_table(  # noqa: E731
          lambda m, x: m(x, **kw), variables, x)
    padded = _by_path(run(x, mask=make_mask(lengths)))
    alone = _by_path(run(x[:, :n]))
    self.assertEqual(sorted(padded), sorted(alone))
    for key, want in alone.items():
      got = padded[key]
      for column in ("entropy", "rank_residual"):
        np.testing.assert_allclose(got[column], want[column], rtol=1e-5)
      np.testing.assert_allclose(got["rho"][:n], want["rho"])
      self.assertTrue(np.all(np.isnan(got["rho"][n:])), got["rho"])
    # and the padding would count if the mask were not read
    self.assertNotAlmostEqual(_by_path(run(x))[key]["entropy"],
                              alone[key]["entropy"], places=3)

  @parameterized.named_parameters(("scan", LinenScan, False),
                                  ("scan_remat", LinenScan, True),
                                  ("remat", LinenRemat, None))
  def test_linen_stacks_measured_layer_by_layer(self, cls, remat):
    if remat is None:
      testutil.skip_unless_slow(self, "nn.remat block by block, op by op; "
                                "scan_remat measures nn.remat in the stack")
    if remat is False:
      testutil.skip_unless_slow(self, "the nn.scan stack op by op; "
                                "scan_remat measures the same stack remat'd")
    x = _inputs()
    model = cls() if remat is None else cls(remat)
    variables = model.init(jax.random.key(0), x)
    mask = _pair_mask()
    rows = for_flax.attention_table(model.apply, variables, x, mask=mask)
    params = _np(variables["params"])
    if remat is None:
      layers = {f"block_{l}/attn": params[f"block_{l}"]["attn"]
                for l in range(L)}
    else:
      layers = {f"layers/attn/{l}": jax.tree.map(lambda a, l=l: a[l],
                                                 params["layers"]["attn"])
                for l in range(L)}
    self.assertEqual(sorted({r["path"] for r in rows}), sorted(layers))
    self.assertEqual(sorted(layers), sorted(for_flax.qk_matrices(variables)))
    _check_rows(self, rows, layers, list(layers), x.astype(np.float64), mask)

  def test_jitted_apply_fn_is_measured_and_its_cache_left_alone(self):
    x, model = _inputs(), LinenNet()
    variables = model.init(jax.random.key(0), x)
    jitted = jax.jit(model.apply)
    jitted(variables, x)
    want = for_flax.attention_table(model.apply, variables, x)
    self.assertEqual(for_flax.attention_table(jitted, variables, x), want)
    self.assertEqual(jitted._cache_size(), 1)  # pylint: disable=protected-access

  @parameterized.named_parameters(
      ("plain", lambda m, x: m(x)),
      ("nnx_jit", nnx.jit(lambda m, x: m(x))),
      ("nnx_remat", lambda m, x: nnx.remat(lambda m, x: m(x))(m, x)))
  def test_nnx_scanned_stack_measured_layer_by_layer(self, apply_fn):
    x, model = _inputs(), NnxScan(nnx.Rngs(0))
    rows = for_flax.attention_table(apply_fn, model, x)
    params = _np(nnx.to_pure_dict(nnx.state(model, nnx.Param)))["layers"]
    layers = {f"layers/{l}": jax.tree.map(lambda a, l=l: a[l], params)
              for l in range(L)}
    self.assertEqual(sorted(layers), sorted(for_flax.qk_matrices(model)))
    _check_rows(self, rows, layers, list(layers), x.astype(np.float64),
                CAUSAL)

  @testutil.slow("a bf16 model's attention table op by op; layouts_test and "
                 "from_weights_test check 16-bit inputs give float32")
  def test_16bit_model_gives_float32_rows_close_to_float32(self):
    x, model = _inputs(), LinenNet()
    variables = model.init(jax.random.key(0), x)
    want = for_flax.attention_table(model.apply, variables, x)
    low = jax.tree.map(lambda a: a.astype(jnp.bfloat16), variables)
    got = for_flax.attention_table(model.apply, low, x.astype(jnp.bfloat16))
    for g, w in zip(got, want):
      self.assertIsInstance(g["entropy"], float)
      np.testing.assert_allclose(g["entropy"], w["entropy"], rtol=0.05)
      np.testing.assert_allclose(g["rank_residual"], w["rank_residual"],
                                 rtol=0.05)

  def test_what_it_cannot_measure_is_an_error_saying_what_to_do(self):
    x, model = _inputs(), LinenNet()
    variables = model.init(jax.random.key(0), x)
    with self.assertRaisesRegex(ValueError, r"(?s)jax.vmap.*apply_fn without"):
      for_flax.attention_table(jax.vmap(model.apply, in_axes=(None, 0)),
                               variables, x)
    with self.assertRaisesRegex(ValueError, "outside jax.jit"):
      jax.jit(lambda v: for_flax.attention_table(model.apply, v, x))(
          variables)
    dense = nn.Dense(4).init(jax.random.key(0), x)
    with self.assertRaisesRegex(
        ValueError, "no attention layer ran.*attention_table_from_weights"):
      for_flax.attention_table(nn.Dense(4).apply, dense, x)
    nnx_model = NnxNet(nnx.Rngs(0))
    with self.assertRaisesRegex(ValueError, "must run the module it is "
                                "handed"):
      for_flax.attention_table(lambda m, x: nnx_model(x), nnx_model, x)
    with self.assertRaisesRegex(ValueError, "no nnx.MultiHeadAttention"):
      for_flax.attention_table(lambda m, x: m(x), nnx.Linear(d, 4,
                                                             rngs=nnx.Rngs(0)),
                               x)



def _linen_rope(query, key, value, mask=None, module=None):
  """A linen attention_fn with rotary positions, passing `module` on."""
  return nn.dot_product_attention(flax_fixtures.rope(query, jnp),
                                  flax_fixtures.rope(key, jnp), value,
                                  mask=mask, module=module)


class GroupedQKNormAndCustomAttentionTest(parameterized.TestCase):
  """flax's grouped-query and QK-norm attention, custom attention functions
  and windows, against NumPy from the raw kernels."""

  @parameterized.named_parameters(
      ("gqa", dict(num_kv_heads=2), None),
      ("mqa", dict(num_kv_heads=1), None),
      ("qk_norm", dict(num_kv_heads=2, normalize_qk=True), None),
      ("rope", dict(attention_fn="rope"), "rope"),
      ("soft_cap", dict(attention_fn="soft_cap"), "soft_cap"))
  def test_nnx_against_numpy(self, kwargs, transform):
    label = f"nnx {kwargs}"
    x = 4 * _inputs()                    # logits large enough to matter
    layer = flax_fixtures.nnx_attention(**kwargs)
    window = np.abs(np.arange(T)[:, None] - np.arange(T)[None]) < 2
    mask = _pair_mask() & window & CAUSAL          # local, causal, padded
    rows = for_flax.attention_table(lambda m, x: m(x, mask=mask), layer, x)
    params = {"": _np(nnx.to_pure_dict(nnx.state(layer, nnx.Param)))}
    _check_rows(self, rows, params, [""], x.astype(np.float64), mask,
                transform, label)
    self.assertTrue(np.isnan(rows[0]["rho"][0]), "key 0 is outside the "
                    "last query's window")
    if transform:   # measuring the unrotated, uncapped logits would fail
      _, plain, _ = flax_fixtures.np_attention(params[""], x, np.broadcast_to(
          mask, (len(x), flax_fixtures.GQA_N, T, T)))
      self.assertGreater(np.abs(np_entropy(plain, mask) - [
          r["entropy"] for r in rows]).max(), 0.02)

  def test_linen_attention_fn_with_rope(self):
    x, model = 4 * _inputs(), nn.MultiHeadDotProductAttention(
        H, attention_fn=_linen_rope)
    variables = model.init(jax.random.key(0), x)
    mask = _pair_mask() & CAUSAL
    rows = for_flax.attention_table(model.apply, variables, x, mask=mask)
    _check_rows(self, rows, {"": _np(variables["params"])}, [""],
                x.astype(np.float64), mask, "rope", "linen rope")

  def test_an_attention_fn_that_hides_its_probabilities_is_refused(self):
    x = _inputs()
    layer = flax_fixtures.nnx_attention(attention_fn="unsown")
    with self.assertRaisesRegex(ValueError, "sowed no attention_weights.*"
                                "attention_table_from_weights"):
      for_flax.attention_table(lambda m, x: m(x), layer, x)
    model = nn.MultiHeadDotProductAttention(     # linen passes no `module`
        H, attention_fn=lambda q, k, v, mask=None: nn.dot_product_attention(
            q, k, v, mask=mask))
    with self.assertRaisesRegex(ValueError, "takes no `module`.*"
                                "attention_table_from_weights"):
      for_flax.attention_table(model.apply, model.init(jax.random.key(0), x),
                               x)

  def test_a_jitted_nnx_apply_compiles_once_per_shape(self):
    # (nnx_scanned_stack's nnx_jit case checks a jitted table's numbers)
    x, model = _inputs(), NnxNet(nnx.Rngs(0))
    traces = []
    apply_fn = nnx.jit(lambda m, x: (traces.append(x.shape), m(x))[1])
    want = for_flax.attention_table(apply_fn, model, x)
    for _ in range(2):
      self.assertEqual(for_flax.attention_table(apply_fn, model, x), want)
    for_flax.attention_table(apply_fn, model, x[:, :3])
    self.assertEqual(traces, [x.shape, x[:, :3].shape])

if __name__ == "__main__":
  absltest.main()
