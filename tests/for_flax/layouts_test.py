"""Tests for qkspec.for_flax.layouts: heads, fused kernels, stacks, dtypes.

Each layout is checked against NumPy from the raw kernels and against the
attention logits of a module that computes with it.
"""
from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import for_flax
from qkspec.theory import locater
import flax_fixtures

T, d, H, L = (flax_fixtures.FLAX_T, flax_fixtures.FLAX_D, flax_fixtures.FLAX_H,
              flax_fixtures.FLAX_L)
D = d // H
LinenNet, _ = flax_fixtures.flax_nets()
LinenScan, _, NnxScan = flax_fixtures.flax_stacks()
HP = locater.LocaterHParams(kappa1=0.3, kappa2=0.7, target=0.5)


def _normal(seed, shape):
  return np.asarray(jax.random.normal(jax.random.key(seed), shape))


def np_heads(wq, wk, heads):
  """W_QK [H, d, d] of [d, H*D] kernels, heads split as reshape(d, H, D)."""
  q, k = (w.reshape(w.shape[0], heads, -1).astype(np.float64)
          for w in (wq, wk))
  return np.stack([q[:, h] @ k[:, h].T for h in range(heads)])


class Conv1D(nn.Module):
  """Hugging Face's FlaxConv1D: kernel [features, d], y = x kernel^T."""
  features: int

  @nn.compact
  def __call__(self, x):
    kernel = self.param("kernel", nn.initializers.normal(0.5),
                        (self.features, x.shape[-1]))
    return x @ kernel.T


class Fused(nn.Module):
  """Unscaled logits [B, H, T, T] from one fused q, k, v projection."""
  layout: str

  @nn.compact
  def __call__(self, x):
    B = x.shape[0]
    if self.layout == "qkv_3hd":   # DenseGeneral((3, H, D))
      y = nn.DenseGeneral((3, H, D), use_bias=False, name="qkv")(x)
      q, k = y[:, :, 0], y[:, :, 1]
    else:
      y = (Conv1D(3 * d, name="c_attn")(x) if self.layout == "c_attn" else
           nn.Dense(3 * d, use_bias=False, name="qkv")(x))
      q, k, _ = (z.reshape(B, T, H, D) for z in jnp.split(y, 3, axis=-1))
    return jnp.einsum("bthd,bshd->bhts", q, k)


class LayoutsTest(parameterized.TestCase):

  def test_merged_heads_are_never_guessed(self):
    # BERT's and ViT's query/key kernels [d, H*D] do not hold H.
    wq, wk = _normal(1, (d, d)), _normal(2, (d, d))
    params = {"enc": {"self": {"query": {"kernel": wq, "bias": np.ones(d)},
                               "key": {"kernel": wk}}}}
    for fn in (for_flax.qk_matrices, for_flax.spectrum_table,
               lambda p: for_flax.locater_penalty(p, HP)):
      with self.assertRaisesRegex(ValueError, "'enc/self'.*pass num_heads="):
        fn(params)
    want = np_heads(wq, wk, H)
    got = for_flax.qk_matrices(params, num_heads=H)
    flax_fixtures.assert_close("W_QK [d, H*D] kernels", got["enc/self"], want,
                               rtol=1e-5, atol=1e-6)
    self.assertGreater(np.abs(want.sum(0) - want[0]).max(), 0.1)
    flax_fixtures.assert_close("penalty [d, H*D] kernels",
                               for_flax.locater_penalty(
                              params, HP, num_heads={"enc/self": H}),
                               flax_fixtures.np_penalty(want, HP), rtol=1e-5)
    rows = for_flax.spectrum_table(params, num_heads=H)
    self.assertEqual([r["head"] for r in rows], list(range(H)))
    for r, w in zip(rows, want):     # at lambda = sqrt(D), D = d / H
      np.testing.assert_allclose(r["r"], np.trace(w) / np.sqrt(D),
                                 atol=flax_fixtures.trace_atol(w) / np.sqrt(D))

  def test_head_counts_are_checked(self):
    params = {"a": {"query": {"kernel": _normal(1, (d, d))},
                    "key": {"kernel": _normal(2, (d, d))}},
              "b": {"query": {"kernel": _normal(3, (d, H, D))},
                    "key": {"kernel": _normal(4, (d, H, D))}}}
    got = for_flax.qk_matrices(params, num_heads={"a": 4})
    self.assertEqual(got["a"].shape, (4, d, d))
    self.assertEqual(got["b"].shape, (H, d, d))
    for bad, msg in (({"a": 4, "c": 2}, r"names \['c'\], which are no"),
                     ({"a": 0}, "positive int"), (True, "positive int"),
                     ({"a": 3}, "does not divide"), ((4, 3), "do not divide"),
                     ({"a": 2, "b": 4}, r"'b'.*hold 2 query heads"),
                     ({"a": 2, "b": (2, 1)}, r"'b'.*and 2 key heads")):
      with self.assertRaisesRegex(ValueError, msg, msg=str(bad)):
        for_flax.qk_matrices(params, num_heads=bad)
    params["b"]["key"]["kernel"] = _normal(4, (d, 3, D))   # 3 does not divide 2
    with self.assertRaisesRegex(ValueError, "'b'.*with K dividing N"):
      for_flax.qk_matrices(params, num_heads={"a": 2})

  @parameterized.parameters("qkv", "qkv_3hd", "c_attn")
  def test_fused_kernels_give_the_logits_they_compute(self, layout):
    x = _normal(0, (2, T, d))
    model = Fused(layout)
    params = model.init(jax.random.key(1), x)["params"]
    heads = None if layout == "qkv_3hd" else H
    if heads:
      with self.assertRaisesRegex(ValueError, "pass num_heads="):
        for_flax.qk_matrices(params)
    (path, w_qk), = for_flax.qk_matrices(params, num_heads=heads).items()
    self.assertEqual(path, "")
    logits = np.einsum("bti,hij,bsj->bhts", x, w_qk, x)
    flax_fixtures.assert_close(f"logits {layout}", logits,
                               model.apply({"params": params}, x),
                               rtol=1e-4, atol=1e-4)
    kernel = np.asarray(params["qkv" if layout == "qkv_3hd" else layout][
        "kernel"], np.float64)
    if layout == "qkv":                 # y = x kernel, split in 3
      q, k = kernel[:, :d], kernel[:, d:2 * d]
    elif layout == "c_attn":            # y = x kernel^T, split in 3
      q, k = kernel[:d].T, kernel[d:2 * d].T
    else:                               # y[..., i, :, :] of [d, 3, H, D]
      q, k = kernel[:, 0].reshape(d, d), kernel[:, 1].reshape(d, d)
    flax_fixtures.assert_close(f"W_QK {layout}", w_qk, np_heads(q, k, H),
                               rtol=1e-5, atol=1e-6)

  def test_stacks_come_out_layer_by_layer(self):
    x = flax_fixtures.flax_inputs()
    scan = LinenScan().init(jax.random.key(0), x)["params"]
    attn = flax_fixtures.float64_tree(scan["layers"]["attn"])
    qks = for_flax.qk_matrices(scan)
    self.assertEqual(list(qks), [f"layers/attn/{l}" for l in range(L)])
    for l in range(L):
      flax_fixtures.assert_close(
          "W_QK linen scan", qks[f"layers/attn/{l}"],
          np_heads(attn["query"]["kernel"][l].reshape(d, d),
                   attn["key"]["kernel"][l].reshape(d, d), H),
          rtol=1e-5, atol=1e-6)
    self.assertLen(for_flax.spectrum_table(scan), L * H)
    # nnx.vmap-built layers [L, d, H, D]: "layers/l"
    model = NnxScan(nnx.Rngs(0))
    kq = np.asarray(model.layers.query.kernel[...])
    kk = np.asarray(model.layers.key.kernel[...])
    qks = for_flax.qk_matrices(model)
    self.assertEqual(list(qks), [f"layers/{l}" for l in range(L)])
    flax_fixtures.assert_close("W_QK nnx vmap stack", qks["layers/1"], np_heads(
        kq[1].reshape(d, d), kk[1].reshape(d, d), H), rtol=1e-5, atol=1e-6)
    # Dense stacks [L, d, H*D] and a fused [L, d, 3d], given num_heads
    wq, wk = _normal(1, (L, d, d)), _normal(2, (L, d, d))
    qkv = np.concatenate([wq, wk, wq], axis=-1)
    stacks = {"dense": {"query": {"kernel": wq}, "key": {"kernel": wk}},
              "fused": {"qkv": {"kernel": qkv}}}
    qks = for_flax.qk_matrices(stacks, num_heads=H)
    self.assertEqual(sorted(qks), sorted(f"{n}/{l}" for n in stacks
                                         for l in range(L)))
    for l in range(L):
      for n in stacks:
        flax_fixtures.assert_close("W_QK [L, d, d] stacks", qks[f"{n}/{l}"],
                                   np_heads(wq[l], wk[l], H), rtol=1e-5,
                                   atol=1e-6)

  def test_stacks_on_the_second_axis_are_read_where_the_out_kernel_says(
      self):
    # MaxText's scan: query [d, L, N, D], key [d, L, K, D], out [N, L, D, d].
    wq, wk = _normal(1, (d, L, 4, D)), _normal(2, (d, L, 2, D))
    params = {"attn": {"query": {"kernel": wq}, "key": {"kernel": wk},
                       "out": {"kernel": _normal(3, (4, L, D, d))}}}
    qks = for_flax.qk_matrices(params)
    self.assertEqual(list(qks), [f"attn/{l}" for l in range(L)])
    for l in range(L):
      flax_fixtures.assert_close("W_QK scanned on axis 1", qks[f"attn/{l}"],
                                 [wq[:, l, h] @ wk[:, l, h // 2].T
                                  for h in range(4)], rtol=1e-5, atol=1e-6)
    for out, msg in ((None, "no out kernel beside it says which"),
                     (_normal(3, (4, L + 1, D, d)), "fits neither")):
      params["attn"]["out"] = {"kernel": out}
      with self.assertRaisesRegex(ValueError, "stack of layers.*" + msg):
        for_flax.qk_matrices(params)
    square = {"query": {"kernel": _normal(1, (H, H, H, D))},   # L = d = N
              "key": {"kernel": _normal(2, (H, H, H, D))},
              "out": {"kernel": _normal(3, (H, H, D, d))}}
    with self.assertRaisesRegex(ValueError, "fits both"):
      for_flax.qk_matrices(square)

  @parameterized.parameters(jnp.bfloat16, jnp.float16)
  def test_16bit_params_give_float32(self, dtype):
    x = flax_fixtures.flax_inputs()
    variables = LinenNet().init(jax.random.key(0), x)
    low = jax.tree.map(lambda a: a.astype(dtype), variables)
    params = flax_fixtures.float64_tree(low["params"])    # the rounded values
    qks = for_flax.qk_matrices(low)
    want = {n: np_heads(params[n]["query"]["kernel"].reshape(d, d),
                        params[n]["key"]["kernel"].reshape(d, d), H)
            for n in ("attn_0", "attn_1")}
    for n, w in qks.items():
      self.assertEqual(w.dtype, jnp.float32)
      flax_fixtures.assert_close("W_QK 16-bit", w, want[n], rtol=1e-5,
                                 atol=1e-6)
    penalty = for_flax.locater_penalty(low, HP)
    self.assertEqual(penalty.dtype, jnp.float32)
    flax_fixtures.assert_close("penalty 16-bit", penalty,
                               flax_fixtures.np_penalty(
                                   [w for ws in want.values() for w in ws],
                                   HP), rtol=1e-5)
    rows = for_flax.spectrum_table(low)
    flax_fixtures.assert_close("scale 16-bit", [r["scale"] for r in rows],
                               [np.sum(w**2) for ws in want.values()
                           for w in ws], rtol=1e-5)

  def test_a_qk_spec_that_cannot_be_right_is_refused(self):
    params = {"attn": {"c_attn": {"kernel": _normal(1, (3 * d, d))},
                       "q": {"kernel": _normal(2, (d, d))},
                       "k3": {"kernel": _normal(3, (d, 3))},
                       "flat": {"kernel": _normal(4, (d,))},
                       "deep": {"kernel": _normal(5, (1, 1, d, H, D))}}}
    kernel = lambda name: lambda p: p["attn"][name]["kernel"]  # noqa: E731
    for spec, msg in (
        ({"x": ("attn/c_attn/kernel",) * 2}, "for both query and key"),
        ({"x": (kernel("c_attn"), kernel("c_attn"))}, "the same array"),
        ({"x": ("attn/q/kernel", "attn/k3/kernel")}, "no whole number"),
        ({"x": (lambda p: p["attn"]["flat"]["kernel"] + 0,
                kernel("flat"))}, r"2-, 3- or 4-D.*\(8,\)"),
        ({"x": (kernel("deep"), lambda p: p["attn"]["deep"]["kernel"] + 0)},
         "2-, 3- or 4-D"),
        ({"x": ("attn/q/kernel",)}, "must be a pair"),
        ({"x": ("attn/q", "attn/k")}, "is a node, not a kernel")):
      with self.assertRaisesRegex(ValueError, msg):
        for_flax.qk_matrices(params, spec, num_heads=H)
    with self.assertRaisesRegex(ValueError, "'x'.*pass num_heads="):
      for_flax.qk_matrices(params, {"x": (
          lambda p: p["attn"]["c_attn"]["kernel"][:d].T,
          lambda p: p["attn"]["c_attn"]["kernel"][d:2 * d].T)})

  def test_partitioned_params_are_read(self):
    x = flax_fixtures.flax_inputs()
    attn = nn.MultiHeadDotProductAttention(H, kernel_init=nn.with_partitioning(
        nn.initializers.lecun_normal(), (None, "heads", None)))
    variables = attn.init(jax.random.key(0), x)
    self.assertIsInstance(variables["params"]["query"]["kernel"],
                          nn.Partitioned)
    plain = flax_fixtures.float64_tree(nn.unbox(variables)["params"])
    np.testing.assert_allclose(
        for_flax.qk_matrices(variables)[""], np_heads(
            plain["query"]["kernel"].reshape(d, d),
            plain["key"]["kernel"].reshape(d, d), H), rtol=1e-5, atol=1e-6)

  def test_traced_parameters(self):
    variables = LinenNet().init(jax.random.key(0), flax_fixtures.flax_inputs())
    with self.assertRaisesRegex(ValueError, "outside them"):
      jax.jit(for_flax.spectrum_table)(variables)
    traced = jax.jit(for_flax.qk_matrices)(variables)
    for n, w in for_flax.qk_matrices(variables).items():
      np.testing.assert_allclose(traced[n], w, rtol=1e-6)


if __name__ == "__main__":
  absltest.main()
