"""Tests for qkspec.training.norm_kernel (Pallas' interpreter on a CPU): the
fused residual sum + dropout + LayerNorm and its gradients against the jnp
sum and Flax's LayerNorm, and the Post-LN block with fused_norm against the
XLA block."""
# pylint: disable=invalid-name
from absl.testing import absltest
from absl.testing import parameterized
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import defaults as common
from qkspec.config import schema
from qkspec.training import norm_kernel
import testutil

V = 40
jax.config.update("jax_numpy_rank_promotion", "raise")


def _inputs(key, shape=(2, 64, 16), dtype=jnp.float32, keep=0.7):
  ks = jax.random.split(key, 5)
  d = shape[-1]
  x = jax.random.normal(ks[0], shape, dtype)
  u = jax.random.normal(ks[1], shape, dtype)
  mask = (jax.random.uniform(ks[2], shape) < keep) / keep
  scale = 1.0 + 0.1 * jax.random.normal(ks[3], (d,))
  bias = 0.1 * jax.random.normal(ks[4], (d,))
  return x, u, mask, scale, bias


class KernelTest(parameterized.TestCase):

  @parameterized.parameters(((2, 64, 16),), ((1, 8, 32),))
  def test_equals_the_jnp_sum_and_its_gradients(self, shape):
    # (2, 64, 16): two row blocks; (1, 8, 32): one block of 8 rows.
    x, u, mask, scale, bias = _inputs(jax.random.key(0), shape)
    np.testing.assert_allclose(
        norm_kernel.add_dropout_norm(x, u, mask, scale, bias),
        norm_kernel.reference(x, u, mask, scale, bias), rtol=1e-5, atol=1e-5)
    w = jax.random.normal(jax.random.key(1), shape)
    grads = [jax.grad(lambda x, u, m, s, b, f=f: jnp.sum(w * f(x, u, m, s, b)),
                      (0, 1, 2, 3, 4))(x, u, mask, scale, bias)
             for f in (norm_kernel.add_dropout_norm, norm_kernel.reference)]
    for name, g, r in zip(("x", "u", "mask", "scale", "bias"), *grads):
      if name == "mask":        # the mask is a constant of the step
        np.testing.assert_array_equal(g, 0.0)
        continue
      np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5, err_msg=name)

  @parameterized.parameters(((2, 64, 16),), ((1, 8, 32),))
  def test_with_the_sublayers_bias_and_its_gradient(self, shape):
    # z = x + m (u + c): c's gradient is the column sum of du.
    x, u, mask, scale, bias = _inputs(jax.random.key(8), shape)
    c = 0.3 * jax.random.normal(jax.random.key(9), shape[-1:])
    row = c.reshape((1,) * (len(shape) - 1) + (-1,))
    want = norm_kernel.reference(x, u + row, mask, scale, bias)
    np.testing.assert_allclose(
        norm_kernel.reference(x, u, mask, scale, bias, u_bias=c), want,
        rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        norm_kernel.add_dropout_norm(x, u, mask, scale, bias, u_bias=c),
        want, rtol=1e-5, atol=1e-5)
    w = jax.random.normal(jax.random.key(1), shape)
    grads = [jax.grad(lambda x, u, s, b, c, f=f: jnp.sum(
        w * f(x, u, mask, s, b, u_bias=c)), (0, 1, 2, 3, 4))(
            x, u, scale, bias, c)
             for f in (norm_kernel.add_dropout_norm, norm_kernel.reference)]
    for name, g, r in zip(("x", "u", "scale", "bias", "u_bias"), *grads):
      np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5, err_msg=name)
    self.assertGreater(float(jnp.max(jnp.abs(grads[0][4]))), 0.1)

  def test_two_references_gradients_add(self):
    # y read by two consumers through outputs=2: the kernel adds dy1 + dy2.
    x, u, mask, scale, bias = _inputs(jax.random.key(10))
    c = 0.3 * jax.random.normal(jax.random.key(11), x.shape[-1:])
    w1, w2 = jax.random.normal(jax.random.key(12), (2, *x.shape))
    y1, y2 = norm_kernel.add_dropout_norm(x, u, mask, scale, bias, u_bias=c,
                                          outputs=2)
    want = norm_kernel.reference(x, u, mask, scale, bias, u_bias=c)
    for y in (y1, y2):
      np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)

    def two(x, u, s, b, c):
      y1, y2 = norm_kernel.add_dropout_norm(x, u, mask, s, b, u_bias=c,
                                            outputs=2)
      return jnp.sum(w1 * y1) + jnp.sum(w2 * jnp.tanh(y2))

    def one(x, u, s, b, c):
      y = norm_kernel.reference(x, u, mask, s, b, u_bias=c)
      return jnp.sum(w1 * y) + jnp.sum(w2 * jnp.tanh(y))

    args = (x, u, scale, bias, c)
    for name, g, r in zip(("x", "u", "scale", "bias", "u_bias"),
                          jax.grad(two, range(5))(*args),
                          jax.grad(one, range(5))(*args)):
      np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5, err_msg=name)
    with self.assertRaisesRegex(ValueError, "outputs must be 1 or 2"):
      norm_kernel.add_dropout_norm(x, u, mask, scale, bias, outputs=3)

  def test_equals_flax_layer_norm_after_dropout(self):
    x, u, mask, scale, bias = _inputs(jax.random.key(2))
    ln = nn.LayerNorm(epsilon=1e-5)
    want = ln.apply({"params": {"scale": scale, "bias": bias}},
                    x + u * mask)
    np.testing.assert_allclose(
        norm_kernel.add_dropout_norm(x, u, mask, scale, bias), want,
        rtol=1e-5, atol=1e-5)

  def test_bfloat16_within_its_rounding(self):
    x, u, mask, scale, bias = _inputs(jax.random.key(3), dtype=jnp.bfloat16)
    got = norm_kernel.add_dropout_norm(x, u, mask, scale, bias)
    self.assertEqual(got.dtype, jnp.bfloat16)
    want = norm_kernel.reference(x, u, mask, scale, bias)
    self.assertLess(float(jnp.max(jnp.abs(got.astype(jnp.float32) - want))),
                    0.05)

  def test_members_under_vmap_equal_one_at_a_time(self):
    x, u, mask, scale, bias = _inputs(jax.random.key(4), (3, 16, 8))
    got = jax.vmap(lambda x, u, m: norm_kernel.add_dropout_norm(
        x, u, m, scale, bias))(x, u, mask)
    c = jax.random.normal(jax.random.key(5), (3, 8))   # a bias per member
    f = lambda x, u, m, c: norm_kernel.add_dropout_norm(  # noqa: E731
        x, u, m, scale, bias, u_bias=c)
    got_c, grad_c = jax.vmap(lambda *a: (f(*a), jax.grad(
        lambda c: jnp.sum(f(*a[:3], c) ** 2))(a[3])))(x, u, mask, c)
    for i in range(3):
      np.testing.assert_allclose(got[i], norm_kernel.add_dropout_norm(
          x[i], u[i], mask[i], scale, bias), rtol=1e-6, atol=1e-6)
      np.testing.assert_allclose(got_c[i], f(x[i], u[i], mask[i], c[i]),
                                 rtol=1e-6, atol=1e-6)
      np.testing.assert_allclose(grad_c[i], jax.grad(lambda c: jnp.sum(
          f(x[i], u[i], mask[i], c) ** 2))(c[i]), rtol=1e-5, atol=1e-6)

  def test_rows_must_fit_the_blocks(self):
    self.assertEqual(norm_kernel.row_block(4096), 64)
    self.assertEqual(norm_kernel.row_block(16), 16)
    with self.assertRaisesRegex(ValueError, "multiple of 64"):
      norm_kernel.row_block(96)


def _task(**model):
  c = common.lm_config()
  c.model.update(d_model=16, ffn_dim=16, num_layers=2, loss_chunk=8, **model)
  return testutil.fused_lm_task(c.model, V)


class BlockTest(absltest.TestCase):

  def test_fused_block_equals_xla_block(self):
    # Same parameters; same loss and gradients without dropout; with
    # dropout the same loss too: the fused block draws the same masks.
    tokens = jax.random.randint(jax.random.key(5), (2, 16), 0, V)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    out = []
    for fused in (False, True):
      task = _task(fused_norm=fused, dropout=0.3)
      params = task.model.init(jax.random.key(6), tokens)["params"]
      params = jax.tree.map(lambda p: p + 0.05, params)   # scale != 1
      loss = lambda p, t=task, det=True: t.summed_loss(  # noqa: E731
          p, batch, deterministic=det, rngs={"dropout": jax.random.key(7)})[0]
      out.append((params, loss(params), jax.grad(loss)(params),
                  loss(params, det=False)))
    (p0, l0, g0, d0), (p1, l1, g1, d1) = out
    jax.tree.map(np.testing.assert_array_equal, p0, p1)
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4,
                                                         atol=1e-6), g1, g0)
    np.testing.assert_allclose(d1, d0, rtol=1e-6)
    self.assertGreater(abs(float(d0 - l0)), 1e-3)    # dropout did something

  def test_needs_post_ln(self):
    task = _task(fused_norm=True, norm="pre")
    with self.assertRaisesRegex(ValueError, "fused_norm needs norm='post'"):
      task.model.init(jax.random.key(0), jnp.zeros((1, 16), jnp.int32))
    c = common.lm_config()
    c.model.fused_norm, c.model.norm = True, "pre"
    with self.assertRaisesRegex(ValueError, "model.norm='post'"):
      schema.validate(c)


if __name__ == "__main__":
  absltest.main()
