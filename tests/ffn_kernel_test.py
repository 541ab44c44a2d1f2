"""Tests for qkspec.training.ffn_kernel (Pallas' interpreter on a CPU): the
FFN with its residual sum, dropout and LayerNorm as one kernel, its
gradients against autodiff of the jnp reference in float32 and bfloat16,
and the Post-LN block with fused_ffn, fused_out_proj
(qkspec.training.proj_norm_kernel) and/or fused_qkv_attention
(qkspec.training.qkv_attention_kernel) against the block with
fused_norm."""
# pylint: disable=invalid-name
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import defaults as common
from qkspec.config import schema
from qkspec.training import ffn_kernel
from qkspec.training import norm_kernel
import testutil

V = 40
jax.config.update("jax_numpy_rank_promotion", "raise")
NAMES = ("x", "w1", "b1", "w2", "c", "scale", "bias")


def _inputs(key, shape=(2, 64, 16), keep=0.7, biased=True):
  ks = jax.random.split(key, 8)
  d = shape[-1]
  x = jax.random.normal(ks[0], shape)
  mask = (jax.random.uniform(ks[1], shape) < keep) / keep
  w1, w2 = (jax.random.normal(k, (d, d)) / np.sqrt(d) for k in ks[2:4])
  b1, c = ((0.3 * jax.random.normal(k, (d,)) if biased else None)
           for k in ks[4:6])
  scale = 1.0 + 0.1 * jax.random.normal(ks[6], (d,))
  bias = 0.1 * jax.random.normal(ks[7], (d,))
  return x, mask, (w1, b1, w2, c, scale, bias)


def _grads(f, x, mask, params, w):
  """Gradients of sum(w * f(x, mask, *params)) by x and every parameter
  (None where a bias is absent)."""
  return testutil.grads_skipping_none(
      lambda x, *ps: jnp.sum(w * f(x, mask, *ps).astype(jnp.float32)),
      (x, *params))


class KernelTest(parameterized.TestCase):

  @parameterized.parameters(((2, 64, 16), True), ((1, 8, 32), True),
                            ((2, 64, 16), False))
  def test_float32_equals_the_reference_and_its_gradients(self, shape,
                                                          biased):
    # (2, 64, 16): two row blocks; (1, 8, 32): one block of 8 rows.
    x, mask, params = _inputs(jax.random.key(0), shape, biased=biased)
    np.testing.assert_allclose(
        ffn_kernel.ffn_norm(x, mask, *params),
        ffn_kernel.reference(x, mask, *params), rtol=1e-5, atol=1e-5)
    w = jax.random.normal(jax.random.key(1), shape)
    got, want = (_grads(f, x, mask, params, w)
                 for f in (ffn_kernel.ffn_norm, ffn_kernel.reference))
    testutil.assert_grads_close(self, NAMES, got, want)

  def test_bfloat16_within_its_rounding(self):
    # The compute dtype's roundings where the XLA path rounds: the kernel's
    # bf16 output is the bf16 reference's, rounded (all but a few
    # elements), where the FFN in float32 on the same inputs differs in
    # a fifth of them or more.
    x, mask, params = _inputs(jax.random.key(2))
    w = jax.random.normal(jax.random.key(3), x.shape)
    xb = x.astype(jnp.bfloat16)
    yk = ffn_kernel.ffn_norm(xb, mask, *params)
    self.assertEqual(yk.dtype, jnp.bfloat16)
    differ = lambda y: float(jnp.mean(  # noqa: E731
        yk != y.astype(jnp.bfloat16)))
    self.assertLess(differ(ffn_kernel.reference(xb, mask, *params)), 0.01)
    self.assertGreater(differ(ffn_kernel.reference(
        xb.astype(jnp.float32), mask, *params)), 0.2)
    got, want, exact = (_grads(f, xx, mask, params, w) for f, xx in (
        (ffn_kernel.ffn_norm, xb), (ffn_kernel.reference, xb),
        (ffn_kernel.reference, x)))
    for name, g, r, e in zip(NAMES, got, want, exact):
      g, r, e = (np.asarray(a, np.float32) for a in (g, r, e))
      scale = np.abs(e).max()
      np.testing.assert_allclose(g, r, atol=0.02 * scale, err_msg=name)
      np.testing.assert_allclose(g, e, atol=0.05 * scale, err_msg=name)
    self.assertEqual(got[1].dtype, jnp.float32)      # W1's gradient

  def test_residual_and_ffn_input_gradients_apart(self):
    # x as the pair (residual, FFN input): each gets its own cotangent,
    # autodiff's of the reference with the two apart; they add up to the
    # gradient by x.
    x, mask, params = _inputs(jax.random.key(4))
    w1, b1, w2, c, scale, bias = params
    w = jax.random.normal(jax.random.key(5), x.shape)

    def apart(x_res, x_in):
      u = jnp.dot(jax.nn.relu(jnp.dot(x_in, w1) + b1[None, None]), w2)
      return jnp.sum(w * norm_kernel.reference(x_res, u, mask, scale, bias,
                                               u_bias=c))

    got = jax.grad(lambda a, b: jnp.sum(w * ffn_kernel.ffn_norm(
        (a, b), mask, *params)), (0, 1))(x, x)
    want = jax.grad(apart, (0, 1))(x, x)
    for g, r in zip(got, want):
      np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
      self.assertGreater(float(jnp.max(jnp.abs(r))), 0.1)
    np.testing.assert_allclose(got[0] + got[1], jax.grad(lambda x: jnp.sum(
        w * ffn_kernel.reference(x, mask, *params)))(x), rtol=1e-4,
                               atol=1e-5)

  def test_two_references_gradients_add(self):
    x, mask, params = _inputs(jax.random.key(6))
    w1, w2 = jax.random.normal(jax.random.key(7), (2, *x.shape))
    y1, y2 = ffn_kernel.ffn_norm(x, mask, *params, outputs=2)
    np.testing.assert_array_equal(y1, y2)
    got = jax.grad(lambda x: (lambda y: jnp.sum(w1 * y[0] + w2 * y[1]))(
        ffn_kernel.ffn_norm(x, mask, *params, outputs=2)))(x)
    want = jax.grad(lambda x: jnp.sum(
        (w1 + w2) * ffn_kernel.reference(x, mask, *params)))(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

  def test_vmapped_members_each_their_own(self):
    # A sweep's members: weights per member, one launch (vmap).
    x, mask, _ = _inputs(jax.random.key(8), (3, 16, 8))
    ps = [_inputs(jax.random.key(10 + i), (16, 8))[2] for i in range(3)]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *ps)
    got = jax.vmap(lambda x, m, p: ffn_kernel.ffn_norm(x, m, *p))(
        x, mask, stacked)
    grads = jax.vmap(lambda x, m, p: jax.grad(lambda p: jnp.sum(
        ffn_kernel.ffn_norm(x, m, *p) ** 2))(p))(x, mask, stacked)
    for i in range(3):
      np.testing.assert_allclose(got[i], ffn_kernel.reference(
          x[i], mask[i], *ps[i]), rtol=1e-5, atol=1e-5)
      want = jax.grad(lambda p: jnp.sum(ffn_kernel.reference(
          x[i], mask[i], *p) ** 2))(ps[i])
      jax.tree.map(lambda g, r: np.testing.assert_allclose(
          g, r, rtol=1e-4, atol=1e-4), jax.tree.map(lambda a: a[i], grads),
                   want)

  def test_refuses_other_shapes(self):
    x, mask, (w1, b1, w2, c, scale, bias) = _inputs(jax.random.key(9))
    with self.assertRaisesRegex(ValueError, "FFN's width equal to d"):
      ffn_kernel.ffn_norm(x, mask, w1[:, :8], b1, w2, c, scale, bias)
    with self.assertRaisesRegex(ValueError, "both FFN biases or neither"):
      ffn_kernel.ffn_norm(x, mask, w1, None, w2, c, scale, bias)
    with self.assertRaisesRegex(ValueError, "outputs must be 1 or 2"):
      ffn_kernel.ffn_norm(x, mask, w1, b1, w2, c, scale, bias, outputs=3)
    with self.assertRaisesRegex(ValueError, "multiple of 64"):
      ffn_kernel.ffn_norm(x[:, :48].reshape(1, 96, 16), mask[:, :48].reshape(
          1, 96, 16), w1, b1, w2, c, scale, bias)


def _task(**model):
  c = common.lm_config()
  c.model.update(**{**dict(d_model=16, ffn_dim=16, num_layers=2,
                           loss_chunk=8), **model})
  return testutil.fused_lm_task(c.model, V)


class BlockTest(parameterized.TestCase):

  @parameterized.named_parameters(
      ("ffn", dict(fused_ffn=True), ["ffn_norm_backward"]),
      ("out_proj", dict(fused_out_proj=True), ["proj_norm_backward"]),
      ("both", dict(fused_ffn=True, fused_out_proj=True),
       ["ffn_norm_backward", "proj_norm_backward"]),
      ("qkv", dict(attention_impl="pallas", fused_qkv=True,
                   fused_qkv_attention=True), ["qkv_attention_backward"]),
      ("all", dict(attention_impl="pallas", fused_qkv=True,
                   fused_qkv_attention=True, fused_ffn=True,
                   fused_out_proj=True),
       ["qkv_attention_backward", "ffn_norm_backward",
        "proj_norm_backward"]))
  def test_sublayer_kernels_block_equals_fused_norm_block(self, fused,
                                                          kernels):
    # Same parameters; same loss and gradients; with dropout the same
    # loss too: the kernels draw the same masks.
    tokens = jax.random.randint(jax.random.key(5), (2, 16), 0, V)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    out = []
    for variant in ({}, fused):
      task = _task(fused_norm=True, dropout=0.3, **variant)
      params = task.model.init(jax.random.key(6), tokens)["params"]
      params = jax.tree.map(lambda p: p + 0.05, params)   # biases != 0
      loss = lambda p, t=task, det=True: t.summed_loss(  # noqa: E731
          p, batch, deterministic=det, rngs={"dropout": jax.random.key(7)})[0]
      out.append((params, loss(params), jax.grad(loss)(params),
                  loss(params, det=False), jax.grad(
                      lambda p, f=loss: f(p, det=False))(params)))
      traced = str(jax.make_jaxpr(jax.grad(loss))(params))
      for kernel in kernels:                         # the kernels ran
        self.assertEqual(kernel in traced, bool(variant), kernel)
    (p0, l0, g0, d0, gd0), (p1, l1, g1, d1, gd1) = out
    jax.tree.map(np.testing.assert_array_equal, p0, p1)
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    for a, b in ((g1, g0), (gd1, gd0)):   # atol: b_k's gradient is 0 +- 1e-6
      jax.tree.map(lambda a, b: np.testing.assert_allclose(
          a, b, rtol=1e-4, atol=1e-5), a, b)
    np.testing.assert_allclose(d1, d0, rtol=1e-6)
    self.assertGreater(abs(float(d0 - l0)), 1e-3)    # dropout did something

  @parameterized.named_parameters(
      ("ffn_without_fused_norm", "fused_ffn", dict(fused_norm=False),
       "fused_norm=False"),
      ("ffn_gelu", "fused_ffn", dict(fused_norm=True, activation="gelu"),
       "gelu"),
      ("ffn_wider", "fused_ffn", dict(fused_norm=True, ffn_dim=32),
       "ffn_dim=32"),
      ("out_proj_without_fused_norm", "fused_out_proj", {},
       "fused_norm=False|needs fused_norm"),
      ("qkv_xla", "fused_qkv_attention", dict(fused_qkv=True), "impl='xla'"),
      ("qkv_unfused", "fused_qkv_attention", dict(attention_impl="pallas"),
       "fused_qkv=False"),
      ("qkv_two_heads", "fused_qkv_attention",
       dict(attention_impl="pallas", fused_qkv=True, num_heads=2),
       "num_heads=2"))
  def test_refused_where_its_kernel_does_not_apply(self, option, model, why):
    task = _task(**{option: True}, **model)
    with self.assertRaisesRegex(ValueError, why):
      task.model.init(jax.random.key(0), jnp.zeros((1, 16), jnp.int32))
    c = common.lm_config()
    c.model.update(**{option: True}, **model)
    with self.assertRaisesRegex(ValueError, f"model.{option}"):
      schema.validate(c)

  def test_the_papers_model_takes_all_three(self):
    c = common.lm_config()
    c.model.update(attention_impl="pallas", fused_qkv=True, fused_norm=True,
                   fused_ffn=True, fused_out_proj=True,
                   fused_qkv_attention=True)
    schema.validate(c)


if __name__ == "__main__":
  absltest.main()
