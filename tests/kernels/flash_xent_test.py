"""qkspec.kernels.flash_xent: the loss through FlashAttention-3's contract
equals the maths.

On a CPU `flash_xent.reference_attention` stands in for jax's Hopper
kernel (same inputs, outputs and base-2 lse); what is tested here is what
qkspec adds around it: the duplicate-column padding and its correction,
the vocabulary splits and their merge, the member axis folded into the
kernel's batch, and the loss's dh and dW.
"""
import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from qkspec.kernels import flash_xent
import testutil


F16 = lambda x: x.astype(jnp.float16).astype(jnp.float32)   # noqa: E731


def _inputs(n=150, d=40, v=1000, seed=0, scale=0.5):
  ks = jax.random.split(jax.random.key(seed), 4)
  return (jax.random.normal(ks[0], (n, d)),
          jax.random.normal(ks[1], (d, v)) * scale,
          jax.random.randint(ks[2], (n,), 0, v),
          (jax.random.uniform(ks[3], (n,)) > 0.2).astype(jnp.float32))


def _exact(h, w, y):
  """(lse, z_y, softmax mean of W's columns) of the float16-rounded
  operands the kernel reads, in float32."""
  z = F16(h) @ F16(w)
  return (jax.nn.logsumexp(z, axis=1),
          jnp.take_along_axis(z, y[:, None], 1)[:, 0],
          jax.nn.softmax(z, axis=1) @ F16(w).T)


def _forward(h, w, y, config):
  return flash_xent.forward(h, w, y, config,
                               attention=flash_xent.reference_attention)


class ForwardTest(parameterized.TestCase):

  @parameterized.parameters(
      ((64, 64, 2, 1),),     # 1000 -> 1024 columns: 24 copies of the last
      ((64, 128, 2, 3),),    # 3 splits of 384: the padding in the last
      ((128, 64, 3, 4),),
      ((64, 200, 2, 5),))    # 5 x 200 = 1000: no padding at all
  def test_equals_the_softmax_statistics(self, config):
    if config[1] % 64:
      with self.assertRaisesRegex(ValueError, "block_kv"):
        _forward(*_inputs()[:3], config)
      return
    h, w, y, _ = _inputs()
    got = jax.jit(functools.partial(_forward, config=config))(h, w, y)
    lse, z_y, mean = _exact(h, w, y)
    np.testing.assert_allclose(got[0], lse, rtol=2e-6)
    np.testing.assert_allclose(got[1], z_y, atol=2e-5)
    # the kernel rounds its output (the mean) to float16: ~5e-4 relative
    np.testing.assert_allclose(got[2], mean, rtol=0, atol=2e-3 * float(
        jnp.abs(mean).max()))

  def test_padding_correction_is_stable_for_very_negative_logits(self):
    """Every logit ~ -40: a zero-padded key (logit 0) would swamp the sum
    (e^-40 x 1000 against 24 x e^0) and its subtraction would cancel; the
    duplicated last column keeps lse to float32 accuracy."""
    h, w, y, _ = _inputs(n=64, d=64)
    h = jnp.abs(h) + 1.0
    w = -jnp.abs(w) * (40.0 / float(jnp.mean(jnp.abs(h) @ jnp.abs(w))))
    lse, _, mean = _exact(h, w, y)
    self.assertLess(float(lse.max()), -20.0)
    got = jax.jit(functools.partial(_forward, config=(64, 64, 2, 1)))(h, w, y)
    np.testing.assert_allclose(got[0], lse, rtol=1e-6)
    np.testing.assert_allclose(got[2], mean, atol=2e-3 * float(
        jnp.abs(mean).max()))

  def test_vmapped_members_fold_into_one_batch(self):
    """Under vmap the kernel sees one call with members x splits batch
    entries, and the result equals a loop over members."""
    members = [_inputs(seed=s)[:3] for s in range(3)]
    stacked = [jnp.stack(x) for x in zip(*members)]
    seen = []

    def attention(q, k, v, config):
      seen.append(q.shape)
      return flash_xent.reference_attention(q, k, v, config)
    fn = functools.partial(flash_xent.forward, config=(64, 64, 2, 2),
                           attention=attention)
    batched = jax.jit(jax.vmap(fn))(*stacked)
    # traced once for its shapes, then called once for 3 members x 2 splits
    self.assertEqual(seen[-1], (3 * 2, 256, 1, 64))   # 150 rows -> 2 x 128
    self.assertLen(seen, 2)
    one = jax.jit(fn)
    for i, args in enumerate(members):
      for a, b in zip(jax.tree.map(lambda x, i=i: x[i], batched), one(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

  def test_bad_settings_are_refused(self):
    for config, what in (((32, 64, 2, 1), "block_q"),
                         ((64, 96, 2, 1), "block_kv"),
                         ((64, 64, 1, 1), "STAGES"),
                         ((64, 64, 2, 0), "SPLITS")):
      with self.assertRaisesRegex(ValueError, what):
        flash_xent.check_config(config)
    with self.assertRaisesRegex(ValueError, "fewer splits"):
      _forward(*_inputs(v=130)[:3], (64, 64, 2, 4))   # last part: 192-255


def _exact_dw(h, w, y, g):
  """dW [d, V] of sum_n g_n CE(h_n W, y_n) in float32."""
  z = h @ w
  return h.T @ (g[:, None] * (jax.nn.softmax(z, axis=1)
                              - jax.nn.one_hot(y, w.shape[1])))


def _weight_grad(h, w, y, g, config, dtype=jnp.float16):
  cast = lambda x: x.astype(dtype).astype(jnp.float32)     # noqa: E731
  lse = jax.nn.logsumexp(cast(h) @ cast(w), axis=1)
  return flash_xent.weight_grad(
      h, w, y, lse, g, config, attention=flash_xent.reference_attention,
      dtype=dtype)


class WeightGradTest(parameterized.TestCase):

  @parameterized.parameters(
      ((64, 64, 2, 1),),     # 150 tokens -> 192: 42 copies of the last
      ((64, 64, 2, 3),),     # 3 groups of 64
      ((128, 64, 2, 2),))    # 2 groups of 128 (150 -> 256)
  def test_equals_the_softmax_gradient(self, config):
    """The algebra (sorted groups, values scaled by e^{-lse}, key padding,
    the one-hot part) in float32, and the float16 kernel's rounding."""
    h, w, y, weights = _inputs()
    g = 0.37 * weights                          # zeros: padding tokens
    want = _exact_dw(h, w, y, g)
    got = jax.jit(functools.partial(_weight_grad, config=config,
                                    dtype=jnp.float32))(h, w, y, g)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * float(
        jnp.abs(want).max()))
    got = jax.jit(functools.partial(_weight_grad, config=config))(h, w, y, g)
    want = _exact_dw(F16(h), F16(w), y, g)
    self.assertLess(float(jnp.linalg.norm(got - want)
                          / jnp.linalg.norm(want)), 2e-3)

  @testutil.slow("dW of 128 tokens, three times")
  def test_groups_keep_float16_values_in_range(self):
    """Two sets of tokens whose lse differ by 50 nats (a feature of h that
    adds 50 to every logit): in one group the values of the upper set are
    e^-46 of the lower's and vanish in float16, so their half of dW is
    lost; two groups (sorted, one set each) keep it."""
    h, w, y, _ = _inputs(n=128, d=40)
    h = h.at[:, 0].set(jnp.where(jnp.arange(128) % 2 == 0, 0.0, 50.0))
    w = w.at[0].set(1.0)
    g = jnp.ones((128,))
    want = _exact_dw(F16(h), F16(w), y, g)
    err = {}
    for groups in (1, 2):
      got = _weight_grad(h, w, y, g, (64, 64, 2, groups))
      err[groups] = float(jnp.linalg.norm(got - want)
                          / jnp.linalg.norm(want))
    self.assertGreater(err[1], 0.1)
    self.assertLess(err[2], 2e-3)

  def test_vmapped_members_fold_into_one_batch(self):
    members = []
    for s in range(3):
      h, w, y, weights = _inputs(seed=s)
      members.append((h, w, y, weights))
    stacked = [jnp.stack(x) for x in zip(*members)]
    seen = []

    def attention(q, k, v, config):
      seen.append(q.shape)
      return flash_xent.reference_attention(q, k, v, config)

    def fn(h, w, y, g):
      lse = jax.nn.logsumexp(F16(h) @ F16(w), axis=1)
      return flash_xent.weight_grad(h, w, y, lse, g, (64, 64, 2, 2),
                                       attention=attention)
    batched = jax.jit(jax.vmap(fn))(*stacked)
    # 3 members x 2 groups of 128 tokens; 1000 vocabulary rows -> 1024
    self.assertEqual(seen[-1], (3 * 2, 1024, 1, 64))
    one = jax.jit(fn)
    for i, args in enumerate(members):
      want = one(*args)
      np.testing.assert_allclose(batched[i], want, rtol=0, atol=1e-5 * float(
          jnp.abs(want).max()))


class LossTest(absltest.TestCase):

  def test_loss_and_gradients_equal_plain(self):
    """`cross_entropy_sum` (the kept settings: 4 vocabulary splits, 2 token
    groups): loss, dh (from the forward's mean, float16) and dW (float16
    values) against optax on the float16-rounded operands."""
    h, w, y, weights = _inputs()
    h, w = F16(h), F16(w)
    loss = lambda a, b: 3.0 * flash_xent.cross_entropy_sum(  # noqa: E731
        a, b, y, weights)
    plain = lambda a, b: 3.0 * jnp.sum(  # noqa: E731
        weights * optax.softmax_cross_entropy_with_integer_labels(a @ b, y))
    (v1, g1), (v2, g2) = (jax.jit(jax.value_and_grad(f, (0, 1)))(h, w)
                          for f in (loss, plain))
    np.testing.assert_allclose(v1, v2, rtol=1e-6)
    for a, b in zip(g1, g2):
      self.assertLess(float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b)),
                      2e-3)

  def test_small_vocabularies_take_fewer_splits(self):
    """V = 50 fits one 128-column block: one part, not the kept four."""
    h, w, y, weights = _inputs(v=50)
    np.testing.assert_allclose(
        flash_xent.cross_entropy_sum(h, w, y, weights),
        jnp.sum(weights * optax.softmax_cross_entropy_with_integer_labels(
            F16(h) @ F16(w), y)), rtol=1e-5)


if __name__ == "__main__":
  absltest.main()
