"""The Pallas output-projection + cross-entropy equals the plain one.

On a CPU the kernels run in Pallas' interpreter (the same kernel bodies a
GPU compiles with Triton); `LoweringTest` also lowers them to Triton IR for
CUDA on this machine, so an operation Triton cannot express fails here.
"""
import functools
import re
from unittest import mock

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from qkspec.config import defaults
from qkspec.config import schema
from qkspec.training import fused_xent
from qkspec.training import pallas_xent
from qkspec.training import step as step_lib
from qkspec.training import sweep as sweep_lib
import testutil

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_default_matmul_precision", "highest")


def _plain(h, kernel, targets, weights):
  ce = optax.softmax_cross_entropy_with_integer_labels(h @ kernel, targets)
  return jnp.sum(weights * ce)


def _inputs(n=45, d=24, v=150, seed=0, scale=0.5):
  ks = jax.random.split(jax.random.key(seed), 4)
  h = jax.random.normal(ks[0], (n, d))
  kernel = jax.random.normal(ks[1], (d, v)) * scale
  targets = jax.random.randint(ks[2], (n,), 0, v)
  weights = (jax.random.uniform(ks[3], (n,)) > 0.2).astype(jnp.float32)
  return h, kernel, targets, weights


def _value_and_grads(loss, h, kernel, *rest):
  return jax.value_and_grad(lambda a, b: loss(a, b, *rest), (0, 1))(h, kernel)


def _assert_close(test, got, want, rtol, atol):
  (v1, g1), (v2, g2) = got, want
  np.testing.assert_allclose(v1, v2, rtol=rtol)
  for a, b in zip(g1, g2, strict=True):
    test.assertEqual(a.shape, b.shape)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol,
                               atol=atol)


class PallasXentTest(parameterized.TestCase):

  @parameterized.parameters((16, 16), (32, 64), (64, 128))
  def test_value_and_grads_equal_plain(self, block_rows, block_vocab):
    """N, V, d not multiples of the blocks (45, 150, 24): padding is exact."""
    args = _inputs()
    pallas = lambda h, k, y, w: pallas_xent.linear_cross_entropy(
        h, k, y, w, block_rows, block_vocab)
    _assert_close(self, _value_and_grads(pallas, *args),
                  _value_and_grads(_plain, *args), 1e-5, 1e-6)

  def test_each_kernel_its_own_blocks_and_launch(self):
    """backward=(dh's, dW's): other BN / BV per kernel (padding to the
    largest), the same value and gradients, and each pallas_call launched
    with its own grid and Triton parameters."""
    args = _inputs()
    backward = ((16, 32, 4, 2), (32, 16, 2, 1))
    pallas = lambda h, k, y, w: pallas_xent.linear_cross_entropy(
        h, k, y, w, 64, 128, backward=backward)
    _assert_close(self, _value_and_grads(pallas, *args),
                  _value_and_grads(_plain, *args), 1e-5, 1e-6)
    h, k, y, w = args
    jaxpr = jax.make_jaxpr(jax.grad(
        lambda a, b: pallas(a, b, y, w), argnums=(0, 1)))(h, k)
    calls = []

    def walk(j):
      for e in j.eqns:
        if e.primitive.name == "pallas_call":
          params = e.params["compiler_params"]
          params = getattr(params, "get", lambda *_: params)("triton", params)
          calls.append((tuple(e.params["grid_mapping"].grid),
                        params.num_warps, params.num_stages))
        for v in e.params.values():
          inner = getattr(v, "jaxpr", None)
          if inner is not None:
            walk(getattr(inner, "jaxpr", inner))
    walk(jaxpr.jaxpr)
    # N = 45 -> 64 rows, V = 150 -> 256 columns (the largest BN, BV)
    self.assertEqual(calls, [((1,), 4, 2),      # forward: 64 / 64
                             ((4,), 4, 2),      # dh: 64 / 16
                             ((16,), 2, 1)])    # dW: 256 / 16

  @parameterized.parameters(
      dict(block_vocab=16, splits=4, backward=None),
      # V = 150 -> 256 columns in 4 splits of 64: the last is padding alone
      dict(block_vocab=64, splits=4, backward=None),
      dict(block_vocab=32, splits=2, backward=((16, 16, 4, 2, 8),
                                               (32, 16, 4, 2))))
  def test_vocabulary_splits_equal_plain(self, block_vocab, splits,
                                         backward):
    """The forward (and dh) kernel's vocabulary split over programs, their
    partial log-sum-exps (and dh) merged after: the same loss and grads."""
    args = _inputs()
    pallas = lambda h, k, y, w: pallas_xent.linear_cross_entropy(
        h, k, y, w, 16, block_vocab, backward=backward, vocab_splits=splits)
    got = _value_and_grads(pallas, *args)
    self.assertTrue(all(np.isfinite(np.asarray(x)).all()
                        for x in jax.tree.leaves(got)))
    _assert_close(self, got, _value_and_grads(_plain, *args), 1e-5, 1e-6)

  @parameterized.parameters(
      dict(block_rows=64, block_vocab=128, splits=1),
      dict(block_rows=16, block_vocab=16, splits=4),
      # V = 150 -> 256 columns in 4 splits of 64: the last is padding alone
      dict(block_rows=16, block_vocab=64, splits=4))
  def test_dh_in_forward_equals_plain(self, block_rows, block_vocab, splits):
    """dh from the forward's softmax mean of W's columns (and, with splits,
    the merged means of the splits): the same loss and gradients, with
    weights and a cotangent other than 1."""
    args = _inputs()
    pallas = lambda h, k, y, w: 3.0 * pallas_xent.linear_cross_entropy(
        h, k, y, w, block_rows, block_vocab, vocab_splits=splits,
        dh_in_forward=True)
    plain = lambda h, k, y, w: 3.0 * _plain(h, k, y, w)
    got = _value_and_grads(pallas, *args)
    self.assertTrue(all(np.isfinite(np.asarray(x)).all()
                        for x in jax.tree.leaves(got)))
    _assert_close(self, got, _value_and_grads(plain, *args), 1e-5, 3e-6)

  def test_dh_in_forward_is_more_accurate_in_bfloat16(self):
    """Against the float32 gradient of the bf16-rounded inputs, for spread
    and confident softmaxes: dh from the forward's mean is closer than the
    dh kernel's (which rounds p - onehot to bfloat16); dW is the same
    kernel's either way."""
    n, d, v = 128, 32, 500
    ks = jax.random.split(jax.random.key(1), 3)
    rounded = lambda x: x.astype(jnp.bfloat16).astype(jnp.float32)  # noqa: E731
    h = rounded(jax.random.normal(ks[0], (n, d)))
    weights = jnp.ones((n,))
    for scale in (0.05, 10.0):            # mean p_y ~ 0.002 and ~ 0.9
      kernel = rounded(jax.random.normal(ks[1], (d, v)) * scale)
      targets = jnp.argmax(h @ kernel + 0.3 * jax.random.gumbel(ks[2], (n, v)),
                           -1)
      exact = jax.grad(_plain, (0, 1))(h, kernel, targets, weights)
      grads = {}
      for in_forward in (False, True):
        loss = lambda a, b, f=in_forward: pallas_xent.linear_cross_entropy(
            a, b, targets, weights, compute_dtype=jnp.bfloat16,
            dh_in_forward=f)
        grads[in_forward] = jax.grad(loss, (0, 1))(h, kernel)
      error = {f: float(jnp.linalg.norm(g[0] - exact[0])
                        / jnp.linalg.norm(exact[0])) for f, g in grads.items()}
      self.assertLess(error[True], 0.5 * error[False], scale)
      self.assertLess(error[True], 1e-3, scale)
      np.testing.assert_array_equal(grads[True][1], grads[False][1])

  def test_large_logits_are_stable(self):
    """|z| ~ 1e3: the online log-sum-exp never overflows.

    Gradients reach ~800; float32's rounding of z (6e-5 at 1e3) enters
    exp(z - lse), hence the relative 2e-4.
    """
    args = _inputs(scale=300.0)
    want = _value_and_grads(_plain, *args)
    for in_forward in (False, True):
      got = _value_and_grads(functools.partial(
          pallas_xent.linear_cross_entropy, dh_in_forward=in_forward), *args)
      self.assertTrue(np.isfinite(got[0]))
      _assert_close(self, got, want, 2e-4, 2e-2)

  def test_weights_select_rows_and_cotangent_scales(self):
    h, kernel, targets, weights = _inputs()
    loss = lambda a, b: 3.0 * pallas_xent.linear_cross_entropy(
        a, b, targets, weights)
    d_h, d_kernel = jax.grad(loss, (0, 1))(h, kernel)
    np.testing.assert_array_equal(np.asarray(d_h)[weights == 0], 0.0)
    keep = np.asarray(weights) > 0
    sub = jax.grad(lambda b: 3.0 * _plain(h[keep], b, targets[keep],
                                          weights[keep]))(kernel)
    np.testing.assert_allclose(np.asarray(d_kernel), np.asarray(sub),
                               rtol=1e-5, atol=1e-6)

  @parameterized.parameters(False, True)
  def test_vmapped_members_equal_a_loop(self, dh_in_forward):
    """The kappa sweep vmaps the loss over members (a batched grid)."""
    members = [_inputs(n=40, d=16, v=100, seed=s) for s in range(3)]
    stacked = [jnp.stack(x) for x in zip(*members)]
    loss = functools.partial(pallas_xent.linear_cross_entropy,
                             dh_in_forward=dh_in_forward)
    fn = lambda h, k, y, w: _value_and_grads(loss, h, k, y, w)
    batched = jax.vmap(fn)(*stacked)
    for i, args in enumerate(members):
      one = jax.tree.map(lambda x, i=i: x[i], batched)
      _assert_close(self, one, fn(*args), 1e-6, 1e-7)

  def test_bfloat16_matches_the_chunked_loss(self):
    """Same bf16 rounding of h and W as fused_xent; float32 accumulation."""
    h, kernel, targets, weights = _inputs(n=64, d=32, v=200)
    pallas = lambda a, b, y, w: pallas_xent.linear_cross_entropy(
        a, b, y, w, compute_dtype=jnp.bfloat16)
    chunked = lambda a, b, y, w: fused_xent.fused_cross_entropy(
        a, b, None, y, w, 16, jnp.bfloat16)
    got = _value_and_grads(pallas, h, kernel, targets, weights)
    want = _value_and_grads(chunked, h, kernel, targets, weights)
    _assert_close(self, got, want, 1e-2, 2e-3)
    exact = _value_and_grads(_plain, h, kernel, targets, weights)
    self.assertGreater(abs(float(got[0] - exact[0])), 0.0)   # really bf16

  def test_bad_inputs_are_refused(self):
    h, kernel, targets, weights = _inputs()
    with self.assertRaisesRegex(ValueError, "power of two"):
      pallas_xent.linear_cross_entropy(h, kernel, targets, weights, 48)
    with self.assertRaisesRegex(ValueError, "power of two"):
      pallas_xent.linear_cross_entropy(h, kernel, targets, weights, 64, 8)
    with self.assertRaisesRegex(ValueError, "do not match"):
      pallas_xent.linear_cross_entropy(h, kernel.T, targets, weights)
    with self.assertRaisesRegex(ValueError, r"\[N\]"):
      pallas_xent.linear_cross_entropy(h, kernel, targets[:-1], weights)


# The GPU the lowering targets. jax >= 0.11 asks which one (it reads the
# compute capability); without a GPU that is an abstract device.
H100 = jax.sharding.AbstractMesh(
    (1,), ("x",), abstract_device=jax.sharding.AbstractDevice(
        device_kind="NVIDIA H100 80GB HBM3", num_cores=132, platform="gpu"))


class LoweringTest(parameterized.TestCase):
  """Pallas -> Triton IR for CUDA, on this CPU (no GPU needed to lower)."""

  def _lower(self, fn, m, n, d, v):
    s = jax.ShapeDtypeStruct
    with jax.sharding.use_abstract_mesh(H100):
      return jax.jit(jax.vmap(fn)).trace(
          s((m, n, d), jnp.float32), s((m, d, v), jnp.float32),
          s((m, n), jnp.int32), s((m, n), jnp.float32)).lower(
              lowering_platforms=("cuda",)).as_text()

  def _kernels(self, text):
    self.assertIn("xla.gpu.triton", text)
    return sorted(re.findall(r'grid_x = (\d+) : i32, grid_y = (\d+) : i32'
                             r'.*?name = "(\w+)"', text))

  @parameterized.parameters((128, jnp.bfloat16), (32, jnp.float32))
  def test_train_step_kernels(self, d, dtype):
    """The paper's shapes (5 members, N 4096, V 33,278; d 128 or 32)."""
    loss = lambda h, k, y, w: pallas_xent.linear_cross_entropy(
        h, k, y, w, compute_dtype=dtype, interpret=False)
    text = self._lower(jax.value_and_grad(loss, (0, 1)), 5, 4096, d, 33278)
    self.assertEqual(self._kernels(text), [("260", "5", "xent_dw"),
                                           ("64", "5", "xent_dh"),
                                           ("64", "5", "xent_forward")])

  def test_vocabulary_splits_add_a_grid_axis(self):
    """Forward split 4 ways, dh 2 ways, dW unsplit: 64 row blocks x splits
    x 5 members programs each."""
    loss = lambda h, k, y, w: pallas_xent.linear_cross_entropy(
        h, k, y, w, compute_dtype=jnp.bfloat16, interpret=False,
        vocab_splits=4, backward=((64, 128, 4, 2, 2), (64, 128, 4, 2)))
    text = self._lower(jax.value_and_grad(loss, (0, 1)), 5, 4096, 128, 33278)
    self.assertEqual(self._kernels(text), [("260", "5", "xent_dw"),
                                           ("64", "2", "xent_dh"),
                                           ("64", "4", "xent_forward")])
    with self.assertRaisesRegex(ValueError, "dW kernel takes no"):
      pallas_xent.linear_cross_entropy(
          *[jnp.zeros(x.shape, x.dtype) for x in _inputs()],
          backward=((64, 128, 4, 2), (64, 128, 4, 2, 2)))

  def test_dh_in_forward_has_no_dh_kernel(self):
    """Training: the forward kernel with the softmax mean, then dW; no dh
    kernel. Evaluation (no gradient): the plain forward kernel."""
    loss = lambda h, k, y, w: pallas_xent.linear_cross_entropy(
        h, k, y, w, compute_dtype=jnp.bfloat16, interpret=False,
        dh_in_forward=True)
    text = self._lower(jax.value_and_grad(loss, (0, 1)), 5, 4096, 128, 33278)
    self.assertEqual(self._kernels(text), [("260", "5", "xent_dw"),
                                           ("64", "5", "xent_forward_dh")])
    text = self._lower(loss, 5, 4096, 128, 33278)
    self.assertEqual(self._kernels(text), [("64", "5", "xent_forward")])

  def test_evaluation_runs_the_forward_kernel_only(self):
    loss = lambda h, k, y, w: pallas_xent.linear_cross_entropy(
        h, k, y, w, compute_dtype=jnp.bfloat16, interpret=False)
    text = self._lower(loss, 2, 1000, 128, 33278)     # 1000 rows: padded
    self.assertEqual(self._kernels(text), [("16", "2", "xent_forward")])


class ConfigTest(absltest.TestCase):

  def test_loss_impl_pallas_trains_like_chunked(self):
    """config.model.loss_impl reaches the model; three sweep steps agree.

    Compared through the losses, not the parameters: Adam turns float
    noise in directions with zero gradient (the attention key bias, which
    softmax ignores) into lr-sized steps of either sign.
    """
    losses = {}
    for impl in ("chunked", "pallas"):
      c = defaults.smoke(defaults.lm_config())
      c.sweep.kappa2 = (0.0, 1.0)
      c.model.loss_impl = impl
      built, losses[impl] = testutil.sweep_losses(c, 3)
      self.assertEqual(built.task.model.loss_impl, impl)
    np.testing.assert_allclose(losses["pallas"], losses["chunked"],
                               rtol=1e-5)
    self.assertGreater(np.abs(losses["chunked"][2] -
                              losses["chunked"][0]).min(), 1e-3)   # trained

  def test_loss_pallas_settings_reach_the_kernels(self):
    self.assertEqual(defaults.lm_config().model.loss_pallas,
                     schema.PALLAS_SETTINGS)
    c = defaults.smoke(defaults.lm_config())
    c.model.loss_impl, c.model.loss_pallas = "pallas", "32x64x8x3"
    schema.validate(c)
    steps = step_lib.build_steps(c)
    seen, original = [], pallas_xent.linear_cross_entropy

    def spy(*args, **kwargs):
      seen.append({k: v for k, v in kwargs.items() if k != "compute_dtype"})
      return original(*args, **kwargs)
    ik, dk, hp = step_lib.member_inputs(sweep_lib.members(c), False)
    with mock.patch.object(pallas_xent, "linear_cross_entropy", spy):
      steps.train(steps.init(ik, hp), steps.task.train_batch(0), dk)
    self.assertEqual(seen[0], dict(block_rows=32, block_vocab=64,
                                   num_warps=8, num_stages=3))
    self.assertEqual(schema.pallas_settings("32x64x8x3/16x16x4x2/64x32x2x1"),
                     dict(block_rows=32, block_vocab=64, num_warps=8,
                          num_stages=3, backward=((16, 16, 4, 2),
                                                  (64, 32, 2, 1))))
    self.assertEqual(schema.pallas_settings("32x64x8x3x4/16x16x4x2x2/"
                                            "64x32x2x1"),
                     dict(block_rows=32, block_vocab=64, num_warps=8,
                          num_stages=3, vocab_splits=4,
                          backward=((16, 16, 4, 2, 2), (64, 32, 2, 1))))
    self.assertEqual(schema.pallas_settings("32x64x8x3x2/fwd/64x32x2x1"),
                     dict(block_rows=32, block_vocab=64, num_warps=8,
                          num_stages=3, vocab_splits=2, dh_in_forward=True,
                          backward=((32, 64, 8, 3, 2), (64, 32, 2, 1))))

  def test_bad_settings_are_refused(self):
    c = defaults.smoke(defaults.lm_config())
    c.model.loss_pallas = "64x128"
    with self.assertRaisesRegex(ValueError, "loss_pallas"):
      schema.validate(c)
    for bad, what in (("48x128x4x2", "BN"), ("64x100x4x2", "BV"),
                      ("64x128x3x2", "WARPS"), ("64x128x4x0", "STAGES"),
                      ("64x128x4x2/64x128x4x2", "three joined by '/'"),
                      ("64x128x4x2/64x128x4x2/64x100x4x2", "BV"),
                      ("64x128x4x2/64x128/64x128x4x2", "FORWARD/DH/DW"),
                      ("64x128x4x2x3", "SPLITS"),
                      ("64x128x4x2x2x1", "BNxBVxWARPSxSTAGES"),
                      ("64x128x4x2/64x128x4x2/64x128x4x2x2", "dW"),
                      ("fwd/64x128x4x2/64x128x4x2", "'fa3' in place of DH"),
                      ("64x128x4x2/64x128x4x2/fwd", "'fa3' in place of DH"),
                      ("64x128x4x2/fwd", "three joined by '/'")):
      with self.assertRaisesRegex(ValueError, what):
        schema.pallas_settings(bad)

  def test_bad_loss_impl_is_refused(self):
    c = defaults.smoke(defaults.lm_config())
    c.model.loss_impl = "triton"
    with self.assertRaisesRegex(ValueError, "loss_impl"):
      schema.validate(c)
    c.model.loss_impl = "pallas"
    c.model.fused_loss = False
    with self.assertRaisesRegex(ValueError, "fused_loss=True"):
      schema.validate(c)


if __name__ == "__main__":
  absltest.main()
