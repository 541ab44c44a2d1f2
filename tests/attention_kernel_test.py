"""Tests for qkspec.training.attention_kernel (Pallas' interpreter on a CPU):
the fused attention and its gradients against the jnp sum, and the model
with attention_impl='pallas' against the XLA path."""
# pylint: disable=invalid-name
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import defaults as common
from qkspec.config import schema
from qkspec.training import attention_kernel
from qkspec.training import layer_stats
import testutil

V = 40
jax.config.update("jax_numpy_rank_promotion", "raise")


def _qkv(key, B=2, T=16, H=2, D=16, dtype=jnp.float32):
  return tuple(jax.random.normal(k, (B, T, H, D), dtype)
               for k in jax.random.split(key, 3))


def _lm(impl, **kw):
  c = common.lm_config()
  c.model.update(d_model=16, ffn_dim=16, num_layers=2, loss_chunk=8,
                 attention_impl=impl, **kw)
  return testutil.fused_lm_task(c.model, V)


class AttentionTest(parameterized.TestCase):

  @parameterized.parameters((16, True), (128, True), (16, False))
  def test_equals_the_softmax_sum_and_its_gradient(self, T, causal):
    # T = 128: two key blocks, the running softmax and the causal block
    # skip; float32 operands, so only the summation order differs.
    q, k, v = _qkv(jax.random.key(0), T=T)
    lam = 3.0
    got = attention_kernel.attention(q, k, v, lam, causal=causal)
    want = attention_kernel.reference(q, k, v, lam, causal=causal)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    w = jax.random.normal(jax.random.key(1), want.shape)
    grads = [jax.grad(lambda *a, f=f: jnp.sum(w * f(*a, lam, causal=causal)),
                      (0, 1, 2))(q, k, v)
             for f in (attention_kernel.attention, attention_kernel.reference)]
    for g, r in zip(*grads):
      np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)

  def test_causal_output_ignores_the_future(self):
    q, k, v = _qkv(jax.random.key(2))
    out = attention_kernel.attention(q, k, v, 1.0)
    v2 = v.at[:, 9:].add(5.0)                       # change tokens 9..15
    out2 = attention_kernel.attention(q, k, v2, 1.0)
    np.testing.assert_array_equal(out[:, :9], out2[:, :9])
    self.assertGreater(float(jnp.abs(out[:, 9:] - out2[:, 9:]).max()), 0.1)

  def test_bfloat16_within_its_rounding(self):
    q, k, v = _qkv(jax.random.key(3), dtype=jnp.bfloat16)
    got = attention_kernel.attention(q, k, v, 4.0)
    self.assertEqual(got.dtype, jnp.bfloat16)
    want = attention_kernel.reference(q, k, v, 4.0)
    err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
    self.assertLess(err, 2e-2 * float(jnp.max(jnp.abs(want))))

  def test_members_under_vmap_equal_one_at_a_time(self):
    q, k, v = (x.reshape(3, 2, 16, 1, 8) for x in _qkv(
        jax.random.key(4), B=6, H=1, D=8))
    got = jax.vmap(lambda *a: attention_kernel.attention(*a, 2.0))(q, k, v)
    for m in range(3):
      np.testing.assert_allclose(
          got[m], attention_kernel.attention(q[m], k[m], v[m], 2.0),
          rtol=1e-6, atol=1e-6)

  def test_sequence_length_must_fit_the_blocks(self):
    self.assertEqual(attention_kernel.block_size(64), 64)
    self.assertEqual(attention_kernel.block_size(8), 8)
    self.assertEqual(attention_kernel.block_size(192), 64)
    with self.assertRaisesRegex(ValueError, "multiple of 64"):
      attention_kernel.block_size(96)


def _packed(key, B=2, T=16, H=2, D=16, dtype=jnp.float32):
  """qkv [B, T, 3, H, D] and three biases [H, D]."""
  k1, k2 = jax.random.split(key)
  qkv = jax.random.normal(k1, (B, T, 3, H, D), dtype)
  return qkv, tuple(0.5 * jax.random.normal(k2, (3, H, D)))


def _unpacked(qkv, biases, lam, causal=True):
  """The reference from the packed projections plus their biases."""
  q, k, v = (qkv[:, :, i] + (0.0 if biases is None else biases[i][None, None])
             for i in range(3))
  return attention_kernel.reference(q, k, v, lam, causal=causal)


class PackedTest(parameterized.TestCase):

  @parameterized.parameters((16, True, True), (64, True, True),
                            (16, False, True), (16, True, False))
  def test_equals_the_softmax_sum_and_its_gradients(self, T, causal, biased):
    qkv, biases = _packed(jax.random.key(10), T=T)
    biases = biases if biased else None
    lam = 3.0
    f = lambda a, b: attention_kernel.packed_attention(  # noqa: E731
        a, lam, biases=b, causal=causal)
    want = _unpacked(qkv, biases, lam, causal)
    np.testing.assert_allclose(f(qkv, biases), want, rtol=1e-5, atol=1e-5)
    w = jax.random.normal(jax.random.key(11), want.shape)
    argnums = (0, 1) if biased else 0
    grads = [jax.grad(lambda a, b, g=g: jnp.sum(w * g(a, b)), argnums)(
        qkv, biases) for g in (f, lambda a, b: _unpacked(a, b, lam, causal))]
    jax.tree.map(lambda g, r: np.testing.assert_allclose(
        g, r, rtol=1e-4, atol=1e-5), *grads)
    if biased:      # the biases' gradients are the sums of dq, dk, dv
      for i in range(3):
        np.testing.assert_allclose(grads[0][1][i], jnp.sum(
            grads[0][0][:, :, i], axis=(0, 1)), rtol=1e-4, atol=1e-5)

  def test_bfloat16_within_its_rounding(self):
    qkv, biases = _packed(jax.random.key(12), dtype=jnp.bfloat16)
    got = attention_kernel.packed_attention(qkv, 4.0, biases=biases)
    self.assertEqual(got.dtype, jnp.bfloat16)
    want = _unpacked(qkv.astype(jnp.float32), biases, 4.0)
    err = float(jnp.max(jnp.abs(got.astype(jnp.float32) - want)))
    self.assertLess(err, 2e-2 * float(jnp.max(jnp.abs(want))))

  def test_members_under_vmap_equal_one_at_a_time(self):
    qkv = jax.random.normal(jax.random.key(13), (3, 2, 16, 3, 1, 8))
    biases = tuple(jax.random.normal(jax.random.key(14 + i), (3, 1, 8))
                   for i in range(3))      # each member its own biases
    f = lambda a, b: attention_kernel.packed_attention(  # noqa: E731
        a, 2.0, biases=b)
    loss = lambda a, b: jnp.sum(f(a, b) ** 2)  # noqa: E731
    got, grad = jax.vmap(lambda a, b: (f(a, b), jax.grad(loss, (0, 1))(
        a, b)))(qkv, biases)
    for m in range(3):
      one = tuple(b[m] for b in biases)
      np.testing.assert_allclose(got[m], f(qkv[m], one), rtol=1e-6,
                                 atol=1e-6)
      jax.tree.map(lambda g, r, m=m: np.testing.assert_allclose(
          g[m], r, rtol=1e-5, atol=1e-6), grad,
                   jax.grad(loss, (0, 1))(qkv[m], one))

  def test_one_block_only(self):
    self.assertTrue(attention_kernel.one_block(64))
    self.assertFalse(attention_kernel.one_block(128))
    qkv, _ = _packed(jax.random.key(15), T=128)
    with self.assertRaisesRegex(ValueError, "T <= 64"):
      attention_kernel.packed_attention(qkv, 1.0)


class ModelTest(parameterized.TestCase):

  @parameterized.parameters(False, True)
  def test_pallas_model_equals_xla_model(self, fused_qkv):
    # Same parameters (same tree, same initial values), same loss and
    # gradients in float32; fused_qkv: the packed kernel (T = 16), with
    # the q/k/v biases (perturbed from their zeros) added in it.
    tokens = jax.random.randint(jax.random.key(5), (2, 16), 0, V)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    out = []
    for impl in ("xla", "pallas"):
      task = _lm(impl, fused_qkv=fused_qkv)
      params = task.model.init(jax.random.key(6), tokens)["params"]
      leaves, tree = jax.tree.flatten(params)
      params = jax.tree.unflatten(tree, [
          p + 0.05 * jax.random.normal(k, p.shape) for p, k in
          zip(leaves, jax.random.split(jax.random.key(7), len(leaves)))])
      loss = lambda p, t=task: t.summed_loss(p, batch, deterministic=True)[0]  # noqa: E731
      out.append((task, params, loss(params), jax.grad(loss)(params)))
      if impl == "pallas":     # which kernel the model calls
        self.assertEqual("name=packed_attention" in str(
            jax.make_jaxpr(loss)(params)), fused_qkv)
    (xla, p0, l0, g0), (pallas, p1, l1, g1) = out
    jax.tree.map(np.testing.assert_array_equal, p0, p1)
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4,
                                                         atol=1e-6), g1, g0)
    # Measuring collects "intermediates": the XLA path, every value equal.
    got = [layer_stats.measure(p0, batch, task=t) for t in (xla, pallas)]
    for key in got[0]:
      np.testing.assert_allclose(got[1][key], got[0][key], rtol=1e-6,
                                 err_msg=key)

  def test_dropout_still_applies_around_the_kernel(self):
    # attention_impl changes the attention only: the blocks' dropout
    # draws the same masks (same rng), so training losses agree.
    tokens = jax.random.randint(jax.random.key(7), (2, 16), 0, V)
    losses = []
    for impl in ("xla", "pallas"):
      task = _lm(impl, dropout=0.3)
      params = task.model.init(jax.random.key(8), tokens)["params"]
      losses.append(task.summed_loss(
          params, {"inputs": tokens, "targets": tokens}, deterministic=False,
          rngs={"dropout": jax.random.key(9)})[0])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)

  def test_unsupported_combinations_fail_clearly(self):
    tokens = jnp.zeros((1, 16), jnp.int32)
    for kw in ({"qk_param": "joint"}, {"attn_dropout": 0.1}):
      model = _lm("pallas", **kw).model
      with self.assertRaisesRegex(ValueError, "needs qk_param='factored'"):
        model.init(jax.random.key(0), tokens)
    c = common.lm_config()
    c.model.attention_impl = "flash"
    with self.assertRaisesRegex(ValueError, "attention_impl"):
      schema.validate(c)


if __name__ == "__main__":
  absltest.main()
