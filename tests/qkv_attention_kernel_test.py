"""Tests for qkspec.training.qkv_attention_kernel (Pallas' interpreter on a
CPU): one head's q, k, v projections inside the attention's kernel, its
gradients against autodiff of the jnp reference, and in bfloat16 the
packed path's numbers (the QKV matmul by XLA, then packed_attention)."""
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.training import attention_kernel
from qkspec.training import qkv_attention_kernel as qkv_kernel
import testutil

jax.config.update("jax_numpy_rank_promotion", "raise")
LAM = 4.0


def _inputs(key, B=2, T=16, d=16, D=16, biased=True):
  ks = jax.random.split(key, 7)
  x = jax.random.normal(ks[0], (B, T, d))
  ws = tuple(jax.random.normal(k, (d, 1, D)) / np.sqrt(d) * 2
             for k in ks[1:4])
  bs = (tuple(0.3 * jax.random.normal(k, (1, D)) for k in ks[4:7])
        if biased else None)
  return x, ws, bs


def _grads(f, x, ws, bs, w):
  return jax.grad(lambda x, ws, bs: jnp.sum(w * f(
      x, ws, LAM, biases=bs).astype(jnp.float32)), (0, 1, 2))(x, ws, bs)


class KernelTest(parameterized.TestCase):

  @parameterized.parameters((True, True), (True, False), (False, True))
  def test_float32_equals_the_reference_and_its_gradients(self, biased,
                                                          causal):
    x, ws, bs = _inputs(jax.random.key(0), biased=biased)
    f = lambda *a, **k: qkv_kernel.projected_attention(  # noqa: E731
        *a, causal=causal, **k)
    r = lambda *a, **k: qkv_kernel.reference(  # noqa: E731
        *a, causal=causal, **k)
    np.testing.assert_allclose(f(x, ws, LAM, biases=bs),
                               r(x, ws, LAM, biases=bs), rtol=1e-5,
                               atol=1e-5)
    w = jax.random.normal(jax.random.key(1), (2, 16, 1, 16))
    got, want = _grads(f, x, ws, bs, w), _grads(r, x, ws, bs, w)
    names = ["x"] + [f"w{i}" for i in "qkv"] + [f"b{i}" for i in "qkv"]
    got, want = jax.tree.leaves(got), jax.tree.leaves(want)
    if biased:   # b_k shifts every logit of a row alike: its gradient is 0
      np.testing.assert_allclose(got.pop(5), 0.0, atol=1e-4)
      want.pop(5)
      names.pop(5)
    testutil.assert_grads_close(self, names[:len(want)], got, want)

  def test_bfloat16_is_the_packed_paths(self):
    # The projections rounded as the QKV matmul's output, then the packed
    # kernel's attention: the same bf16 numbers, forward and backward.
    x, ws, bs = _inputs(jax.random.key(2))
    xb = x.astype(jnp.bfloat16)

    def packed(x, ws, lam, biases):
      d, D = x.shape[-1], ws[0].shape[-1]
      w = jnp.concatenate([w.astype(x.dtype).reshape(d, D) for w in ws], 1)
      qkv = jnp.einsum("btd,de->bte", x, w).reshape(*x.shape[:2], 3, 1, D)
      return attention_kernel.packed_attention(qkv, lam, biases=biases)

    y = qkv_kernel.projected_attention(xb, ws, LAM, biases=bs)
    self.assertEqual(y.dtype, jnp.bfloat16)
    self.assertLess(float(jnp.mean(y != packed(xb, ws, LAM, bs))), 0.01)
    self.assertGreater(float(jnp.mean(y != qkv_kernel.reference(
        x, ws, LAM, biases=bs).astype(jnp.bfloat16))), 0.2)
    w = jax.random.normal(jax.random.key(3), y.shape)
    got = jax.tree.leaves(_grads(qkv_kernel.projected_attention, xb, ws,
                                 bs, w))
    want = jax.tree.leaves(_grads(packed, xb, ws, bs, w))
    for g, r in zip(got, want):
      g, r = np.asarray(g, np.float32), np.asarray(r, np.float32)
      np.testing.assert_allclose(g, r, atol=0.01 * np.abs(r).max())

  def test_vmapped_members_each_their_own(self):
    xs, wss, bss = zip(*(_inputs(jax.random.key(10 + i), T=8, d=8, D=8)
                         for i in range(3)))
    stack = lambda t: jax.tree.map(lambda *a: jnp.stack(a), *t)  # noqa: E731
    got = jax.vmap(lambda x, ws, bs: qkv_kernel.projected_attention(
        x, ws, LAM, biases=bs))(stack(xs), stack(wss), stack(bss))
    for i in range(3):
      np.testing.assert_allclose(got[i], qkv_kernel.reference(
          xs[i], wss[i], LAM, biases=bss[i]), rtol=1e-5, atol=1e-5)

  def test_refuses_long_sequences_and_heads(self):
    x, ws, bs = _inputs(jax.random.key(4))
    with self.assertRaisesRegex(ValueError, "at most 64 tokens"):
      qkv_kernel.projected_attention(jnp.zeros((1, 128, 16)), ws, LAM)
    two = tuple(w.reshape(16, 2, 8) for w in ws)
    with self.assertRaisesRegex(ValueError, "one head"):
      qkv_kernel.projected_attention(x, two, LAM, biases=bs)


if __name__ == "__main__":
  absltest.main()
