"""qkspec.kernels, the face the model calls: `model.kernels="pallas"` (the
kernels in Pallas' interpreter on a CPU) against `"xla"` on the same model,
and the loss's two implementations against its reference."""
# pylint: disable=invalid-name
from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import kernels
from qkspec.kernels import fused_attention
from qkspec.config import defaults as common
from qkspec.config import schema
from qkspec.training import layer_stats
import testutil
import training_fixtures

V = 40


def _lm(impl, **kw):
  c = common.lm_config()
  c.model.update(d_model=16, ffn_dim=16, num_layers=1, kernels=impl, **kw)
  return training_fixtures.lm_task(c.model, V)


def _perturbed(params, seed=7):
  """`params` + 0.05 N(0, 1): biases and norms away from their 0s and 1s."""
  leaves, tree = jax.tree.flatten(params)
  return jax.tree.unflatten(tree, [
      p + 0.05 * jax.random.normal(k, p.shape) for p, k in
      zip(leaves, jax.random.split(jax.random.key(seed), len(leaves)))])


class OutputXentTest(parameterized.TestCase):

  @parameterized.parameters("xla", "pallas")
  def test_equals_the_reference_and_its_gradients(self, impl):
    # V = 200: two vocabulary parts of 128 columns, the second padded
    ks = jax.random.split(jax.random.key(0), 4)
    h = jax.random.normal(ks[0], (70, 64))
    w = 0.5 * jax.random.normal(ks[1], (64, 200))
    y = jax.random.randint(ks[2], (70,), 0, 200)
    weights = (jax.random.uniform(ks[3], (70,)) > 0.2).astype(jnp.float32)
    if impl == "pallas":          # it reads float16: compare on those
      h, w = (x.astype(jnp.float16).astype(jnp.float32) for x in (h, w))
    f = lambda a, b: kernels.output_xent(a, b, y, weights, impl=impl)  # noqa: E731
    g = lambda a, b: kernels.output_xent_reference(a, b, y, weights)  # noqa: E731
    (v1, g1), (v2, g2) = (jax.jit(jax.value_and_grad(fn, (0, 1)))(h, w)
                          for fn in (f, g))
    np.testing.assert_allclose(v1, v2, rtol=1e-5)
    for a, b in zip(g1, g2):
      self.assertLess(float(jnp.linalg.norm(a - b) / jnp.linalg.norm(b)),
                      2e-3 if impl == "pallas" else 1e-5)
    with self.assertRaisesRegex(ValueError, "impl must be one of"):
      kernels.output_xent(h, w, y, weights, impl="triton")


class ModelTest(absltest.TestCase):

  @testutil.slow("the whole model through interpreted kernels; each kernel "
                 "equals its reference in the kernel tests")
  def test_pallas_model_equals_xla_model(self):
    # Same parameters (tree and initial values), same loss and gradients in
    # float32 (the loss reads float16 operands: 1e-3); the attention reads
    # the packed projections with their biases (perturbed from 0).
    tokens = jax.random.randint(jax.random.key(5), (1, 16), 0, V)
    batch = {"inputs": tokens, "targets": jnp.roll(tokens, -1, axis=1)}
    out = []
    for impl in ("xla", "pallas"):
      task = _lm(impl)
      params = task.model.init(jax.random.key(6), tokens)["params"]
      params = _perturbed(params)
      loss = lambda p, t=task: t.summed_loss(p, batch, deterministic=True)[0]  # noqa: E731
      out.append((task, params, *jax.jit(jax.value_and_grad(loss))(params)))
      if impl == "pallas":     # which kernels the model calls
        jaxpr = str(jax.make_jaxpr(loss)(params))
        for name in ("packed_attention", "add_dropout_norm"):
          self.assertIn(f"name={name}", jaxpr)
    (xla, p0, l0, g0), (pallas, p1, l1, g1) = out
    jax.tree.map(np.testing.assert_array_equal, p0, p1)
    np.testing.assert_allclose(l1, l0, rtol=1e-3)
    # (the keys' bias has no gradient: softmax ignores a shift of its row)
    jax.tree.map(lambda a, b: self.assertLess(
        float(jnp.linalg.norm(a - b)), 1e-3 * float(jnp.linalg.norm(b))
        + 1e-5), g1, g0)
    # Measuring collects "intermediates": the XLA path, every value equal.
    got = [layer_stats.measure(p0, batch, task=t) for t in (xla, pallas)]
    for key in got[0]:
      np.testing.assert_allclose(got[1][key], got[0][key], rtol=1e-3,
                                 err_msg=key)

  @testutil.slow("the model's dropout through the interpreted Post-LN kernel; "
                 "fused_layer_norm_test checks the kernel's mask")
  def test_dropout_masks_are_the_same(self):
    # The Post-LN kernel applies the mask nn.Dropout draws (same rng).
    tokens = jax.random.randint(jax.random.key(7), (1, 16), 0, V)
    batch = {"inputs": tokens, "targets": tokens}
    losses = []
    for impl in ("xla", "pallas"):
      task = _lm(impl, dropout=0.3)
      params = task.model.init(jax.random.key(8), tokens)["params"]
      loss = jax.jit(lambda p, det, t=task: t.summed_loss(  # noqa: E731
          p, batch, deterministic=det, rngs={"dropout": jax.random.key(9)})[0],
                     static_argnums=1)
      losses.append([loss(params, det) for det in (True, False)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-3)
    self.assertGreater(abs(float(losses[0][1] - losses[0][0])), 1e-2)

  def test_unsupported_combinations_fail_clearly(self):
    tokens = jnp.zeros((1, 16), jnp.int32)
    for kw in ({"qk_param": "joint"}, {"attn_dropout": 0.1}):
      model = _lm("pallas", **kw).model
      with self.assertRaisesRegex(ValueError, "needs qk_param='factored'"):
        model.init(jax.random.key(0), tokens)
      c = common.lm_config()
      c.model.kernels = "pallas"
      c.model.update(kw)
      with self.assertRaisesRegex(ValueError, "kernels='pallas'"):
        schema.validate(c)
    c = common.lm_config()
    c.model.kernels = "pallas"
    c.data.seq_len = 128
    with self.assertRaisesRegex(ValueError, "seq_len <= 64; .*seq_len=128"):
      schema.validate(c)
    self.assertEqual(schema.PALLAS_MAX_SEQ_LEN, fused_attention.BLOCK)
    c = common.lm_config()
    c.model.kernels = "triton"
    with self.assertRaisesRegex(ValueError, "model.kernels"):
      schema.validate(c)
    c = common.theory_config()
    c.model.kernels = "pallas"
    with self.assertRaisesRegex(ValueError, "for the LM task"):
      schema.validate(c)


if __name__ == "__main__":
  absltest.main()
