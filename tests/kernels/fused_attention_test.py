"""qkspec.kernels.fused_attention (Pallas' interpreter on a CPU) against the
float32 softmax sum: values and gradients, the biases, the causal mask,
bfloat16, vmapped members, and sequences past one block."""
# pylint: disable=invalid-name
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import kernels



def _packed(key, B=2, T=16, H=2, D=16, dtype=jnp.float32):
  """qkv [B, T, 3, H, D] and three biases [H, D]."""
  k1, k2 = jax.random.split(key)
  qkv = jax.random.normal(k1, (B, T, 3, H, D), dtype)
  return qkv, tuple(0.5 * jax.random.normal(k2, (3, H, D)))


def _naive(qkv, biases, lam, causal):
  """Each (sequence, head, query) by a loop over its keys, in numpy."""
  qkv = np.asarray(qkv, np.float64)
  B, T, _, H, D = qkv.shape
  out = np.zeros((B, T, H, D))
  for b in range(B):
    for h in range(H):
      q, k, v = (qkv[b, :, i, h] + (0 if biases is None else
                                    np.asarray(biases[i][h], np.float64))
                 for i in range(3))
      for t in range(T):
        keys = range(t + 1) if causal else range(T)
        s = np.array([q[t] @ k[j] / lam for j in keys])
        p = np.exp(s - s.max())
        out[b, t, h] = (p / p.sum()) @ v[list(keys)]
  return out


class AttentionTest(parameterized.TestCase):

  def test_reference_equals_a_loop_over_keys(self):
    qkv, biases = _packed(jax.random.key(0), B=1, T=6, H=2, D=4)
    for causal in (True, False):
      np.testing.assert_allclose(
          kernels.attention_reference(qkv, 1.7, biases=biases, causal=causal),
          _naive(qkv, biases, 1.7, causal), rtol=1e-5, atol=1e-6)

  @parameterized.parameters((16, True, True), (64, True, True),
                            (16, False, True), (16, True, False))
  def test_equals_the_reference_and_its_gradients(self, T, causal, biased):
    qkv, biases = _packed(jax.random.key(10), B=1, T=T, D=8)
    biases = biases if biased else None
    lam = 3.0
    f = jax.jit(lambda a, b: kernels.attention(  # noqa: E731
        a, lam, biases=b, causal=causal))
    g = lambda a, b: kernels.attention_reference(  # noqa: E731
        a, lam, biases=b, causal=causal)
    want = g(qkv, biases)
    np.testing.assert_allclose(f(qkv, biases), want, rtol=1e-5, atol=1e-5)
    w = jax.random.normal(jax.random.key(11), want.shape)
    argnums = (0, 1) if biased else 0
    grads = [jax.jit(jax.grad(lambda a, b, h=h: jnp.sum(w * h(a, b)),
                              argnums))(qkv, biases) for h in (f, g)]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(
        a, b, rtol=1e-4, atol=1e-5), *grads)
    if biased:      # the biases' gradients are the sums of dq, dk, dv
      for i in range(3):
        np.testing.assert_allclose(grads[0][1][i], jnp.sum(
            grads[0][0][:, :, i], axis=(0, 1)), rtol=1e-4, atol=1e-5)

  def test_causal_output_ignores_the_future(self):
    qkv, _ = _packed(jax.random.key(2))
    out = kernels.attention(qkv, 1.0)
    changed = qkv.at[:, 9:, 2].add(5.0)            # values of tokens 9..15
    out2 = kernels.attention(changed, 1.0)
    np.testing.assert_array_equal(out[:, :9], out2[:, :9])
    self.assertGreater(float(jnp.abs(out[:, 9:] - out2[:, 9:]).max()), 0.1)

  def test_bfloat16_within_its_rounding(self):
    qkv, biases = _packed(jax.random.key(12), dtype=jnp.bfloat16)
    got = kernels.attention(qkv, 4.0, biases=biases)
    self.assertEqual(got.dtype, jnp.bfloat16)
    want = kernels.attention_reference(qkv, 4.0, biases=biases)
    err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
    self.assertLess(err, 2e-2 * float(jnp.max(jnp.abs(want))))

  def test_members_under_vmap_equal_one_at_a_time(self):
    qkv = jax.random.normal(jax.random.key(13), (2, 1, 8, 3, 1, 8))
    biases = tuple(jax.random.normal(jax.random.key(14 + i), (2, 1, 8))
                   for i in range(3))      # each member its own biases
    f = lambda a, b: kernels.attention(a, 2.0, biases=b)  # noqa: E731
    loss = lambda a, b: jnp.sum(f(a, b) ** 2)  # noqa: E731
    got, grad = jax.jit(jax.vmap(lambda a, b: (f(a, b), jax.grad(
        loss, (0, 1))(a, b))))(qkv, biases)
    for m in range(2):
      one = tuple(b[m] for b in biases)
      np.testing.assert_allclose(got[m], f(qkv[m], one), rtol=1e-6,
                                 atol=1e-6)
      jax.tree.map(lambda g, r, m=m: np.testing.assert_allclose(
          g[m], r, rtol=1e-5, atol=1e-6), grad,
                   jax.jit(jax.grad(loss, (0, 1)))(qkv[m], one))

  def test_bad_shapes_are_refused(self):
    qkv, _ = _packed(jax.random.key(15), T=96)
    with self.assertRaisesRegex(ValueError, "T <= 64 tokens, got 96"):
      kernels.attention(qkv, 1.0)
    with self.assertRaisesRegex(ValueError, r"\[B, T, 3, H, D\]"):
      kernels.attention(qkv[:, :, :2], 1.0)


if __name__ == "__main__":
  absltest.main()
