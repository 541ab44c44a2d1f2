r"""qkspec.training.step against an AdamW and LocATER written
here in NumPy: the compiled step must equal an independent reference, not
only itself.

The reference takes the data loss's gradient from the code's `objective`
with the penalty off (kappa1 = kappa2 = 0) and computes everything else
itself: the LocATER penalty and its gradient
:math:`s(2\kappa_1 W + 2\kappa_2(\mathrm{tr}\,W - \tau) I)` under both
readings of kappa, and AdamW at a constant learning rate (Adam
with bias correction, then the decoupled decay of every parameter,
:math:`p \leftarrow p - \eta_t(\hat m/(\sqrt{\hat v} + \epsilon)
+ w p)`, as fairseq's Adam and `optax.adamw` without a mask).
"""
import dataclasses
import functools

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np
import optax

from qkspec.theory import locater
from qkspec.training import step as step_lib
from qkspec.training import sweep
import testutil

STEPS = 3
KAPPA1, KAPPA2, TARGET = 0.5, 0.3, 2.0


def _config(weight_decay=0.1, added_to="mean_loss",
            kappas=(KAPPA1, KAPPA2, TARGET), lr=1e-2):
  """The theory task's smoke model (d = 8) as one run, not a sweep."""
  c = testutil.get_config("theory_task", "smoke")
  c.sweep.kappa1 = c.sweep.kappa2 = c.sweep.target = ()
  c.locater.kappa1, c.locater.kappa2, c.locater.target = kappas
  c.locater.penalty_added_to = added_to
  c.opt.update(dict(lr=lr, weight_decay=weight_decay))
  c.num_steps = STEPS
  return c


def reference_penalty(w_qk_Hxdxd: np.ndarray, kappa1, kappa2, target, scale
                      ) -> tuple[float, np.ndarray]:
  """s * sum over heads of LocATER (Sec. 6), and its gradient by W_QK."""
  trace_H = np.trace(w_qk_Hxdxd, axis1=-2, axis2=-1)
  value = np.sum(kappa1 * np.sum(w_qk_Hxdxd**2, axis=(-2, -1))
                 + kappa2 * (trace_H - target)**2)
  eye = np.eye(w_qk_Hxdxd.shape[-1])
  grad = (2 * kappa1 * w_qk_Hxdxd
          + 2 * kappa2 * (trace_H - target)[:, None, None] * eye)
  return scale * value, scale * grad


class AdamW:
  """AdamW in float64 NumPy on a dict of arrays (fairseq / Loshchilov &
  Hutter): the decay is added to the Adam direction, both scaled by lr."""

  def __init__(self, opt, params):
    self.opt = opt
    self.mu = {k: np.zeros_like(v) for k, v in params.items()}
    self.nu = {k: np.zeros_like(v) for k, v in params.items()}
    self.count = 0

  def update(self, params, grads, lr):
    o = self.opt
    self.count += 1
    out = {}
    for k, p in params.items():
      g = grads[k]
      self.mu[k] = o.b1 * self.mu[k] + (1 - o.b1) * g
      self.nu[k] = o.b2 * self.nu[k] + (1 - o.b2) * g * g
      m_hat = self.mu[k] / (1 - o.b1**self.count)
      v_hat = self.nu[k] / (1 - o.b2**self.count)
      out[k] = p - lr * (m_hat / (np.sqrt(v_hat) + o.eps)
                         + o.weight_decay * p)
    return out


def _flat(tree) -> dict[str, np.ndarray]:
  return {jax.tree_util.keystr(path): np.asarray(leaf, np.float64)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


W_QK = "['decoder']['block_0']['attn']['w_qk']"   # the joint W_QK, [H, d, d]


def reference_run(config, shared, steps=STEPS):
  """[(params after update t, loss, penalty of update t)] of the reference.

  The data loss's gradient comes from the code's `objective` with kappa = 0
  (`shared.data_grads`); everything else is computed here.
  """
  off = locater.LocaterHParams(0.0, 0.0, 0.0)
  scale = {"mean_loss": 1.0,      # the sequences of a batch: 1 target each
           "summed_loss": 1.0 / config.data.batch_size}[
               config.locater.penalty_added_to]
  lc = config.locater
  params = _flat(shared.params0)
  adam = AdamW(config.opt, params)
  out = []
  for t in range(steps):
    as_tree = jax.tree.unflatten(
        shared.treedef, [jnp.asarray(v, jnp.float32) for v in params.values()])
    key = jax.random.fold_in(shared.dropout_key, t)
    grads, (loss, _) = shared.data_grads(as_tree, off, shared.batch(t), key)
    grads = _flat(grads)
    penalty, penalty_grad = reference_penalty(
        params[W_QK], lc.kappa1, lc.kappa2, lc.target, scale)
    grads[W_QK] = grads[W_QK] + penalty_grad
    params = adam.update(params, grads, config.opt.lr)
    out.append((params, float(loss), penalty))
  return out


def compiled_run(config, shared, steps=STEPS, hparams=None):
  """The same updates by `step.train_step` with `config`'s optimizer
  (`step.make_optimizer`) and reading (`step.penalty_scale_of`), jitted."""
  train, tx = shared.train_step(config)
  params = jax.tree.map(jnp.asarray, shared.params0)
  lc = config.locater
  state = step_lib.TrainState(
      step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
      hparams=hparams or locater.LocaterHParams(lc.kappa1, lc.kappa2,
                                                lc.target))
  out = []
  for t in range(steps):
    state, metrics = train(state, shared.batch(t), shared.dropout_key)
    out.append((_flat(state.params), float(metrics["loss"]),
                float(metrics["penalty"])))
  return out, state


class _Shared:
  """What every case shares: the task, its first batches, the initial
  parameters and the data loss's jitted gradient (one compile each)."""

  def __init__(self):
    config = _config()
    self.task = step_lib.build_steps(sweep.make_plan(config)).task
    init_key, self.dropout_key = step_lib.member_keys(config.seed)
    self.params0 = jax.tree.map(np.asarray, self.task.model.init(
        init_key, self.task.example_inputs)["params"])
    self.treedef = jax.tree.structure(self.params0)
    self._batches = {}
    self._steps = {}
    self.data_grads = jax.jit(jax.grad(functools.partial(
        step_lib.objective, task=self.task), has_aux=True))

  def batch(self, t):
    """The task's train batch of step t."""
    if t not in self._batches:
      self._batches[t] = self.task.train_batch(t)
    return self._batches[t]

  def train_step(self, config):
    """(jitted `train_step`, its optimizer) of `config`'s optimizer and
    reading, compiled once per distinct setting."""
    o = config.opt
    setting = (o.lr, o.weight_decay, config.locater.penalty_added_to)
    if setting not in self._steps:
      tx = step_lib.make_optimizer(o)
      self._steps[setting] = jax.jit(functools.partial(
          step_lib.train_step, task=self.task, tx=tx,
          penalty_scale=step_lib.penalty_scale_of(config))), tx
    return self._steps[setting]


@functools.cache
def _shared() -> _Shared:
  return _Shared()


class TrainStepAgainstReferenceTest(parameterized.TestCase):

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.shared = _shared()

  @parameterized.named_parameters(
      # decay on and off, both readings (a compile each)
      ("decay_off_mean_loss", 0.0, "mean_loss"),
      ("decay_on_summed_loss", 0.1, "summed_loss"),
  )
  def test_three_steps_equal_numpy_adamw_and_locater(
      self, weight_decay, added_to):
    config = _config(weight_decay, added_to)
    want = reference_run(config, self.shared)
    got, state = compiled_run(config, self.shared)
    self.assertEqual(int(state.step), STEPS)
    start = _flat(self.shared.params0)
    for t, ((p_got, loss_got, pen_got), (p_want, loss_want, pen_want)) in (
        enumerate(zip(got, want))):
      self.assertAlmostEqual(loss_got, loss_want, delta=1e-5 * loss_want)
      self.assertAlmostEqual(pen_got, pen_want, delta=1e-5 * pen_want)
      for name in p_want:
        msg = f"{name} after update {t + 1}"
        # atol: 1e-4 of an update (lr = 1e-2), float32's reach where a
        # gradient's terms cancel
        np.testing.assert_allclose(p_got[name], p_want[name], rtol=1e-5,
                                   atol=1e-6, err_msg=msg)
        # the change itself to 0.1%: a setting off by 1% of it fails
        np.testing.assert_allclose(p_got[name] - start[name],
                                   p_want[name] - start[name], rtol=1e-3,
                                   atol=1e-6, err_msg=msg)

  def test_reference_settings_matter_beyond_the_tolerance(self):
    """The comparison above can fail: doubling the decay or the rate, or
    the other reading moves the reference's parameters past its
    tolerance."""
    base = reference_run(_config(), self.shared)[-1][0]
    variants = {"opt.weight_decay": 0.2, "opt.lr": 2e-2,
                "locater.penalty_added_to": "summed_loss"}
    for field, value in variants.items():
      other = _config()
      other.update_from_flattened_dict({field: value})
      moved = reference_run(other, self.shared)[-1][0]
      self.assertFalse(all(np.allclose(moved[k], base[k], rtol=1e-3,
                                       atol=1e-6) for k in base), field)


class TrainingTest(absltest.TestCase):
  """What a few hundred compiled steps must do on the theory task."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    cls.shared = _shared()

  def test_theory_task_loss_falls_towards_its_optimum(self):
    """50 steps of Adam (lr 1e-2, no LocATER) take the squared loss on 4
    held-out batches from ~24 to within 1.75x its optimum 0.5 d (the next
    step's noise, x_{T+1} - x_T ~ N(0, I))."""
    config = _config(0.0)
    off = locater.LocaterHParams(0.0, 0.0, 1.0)
    held_out = [self.shared.batch(10_000 + i) for i in range(4)]

    def held_out_loss(params):
      return np.mean([float(self.shared.data_grads(
          params, off, b, self.shared.dropout_key)[1][0]) for b in held_out])

    before = held_out_loss(self.shared.params0)
    _, state = compiled_run(config, self.shared, steps=50, hparams=off)
    after = held_out_loss(state.params)
    optimum = 0.5 * config.model.d_model
    self.assertGreater(before, 3 * optimum)
    self.assertLess(after, 0.3 * before)
    self.assertLess(after, 1.75 * optimum)

  def test_locater_alone_drives_w_qk_to_the_penalty_minimum(self):
    """With the data loss off, 200 steps of AdamW (a cosine from lr 0.05
    to 0 after one warm-up step) put W_QK at c I, c = kappa2 tau /
    (kappa1 + kappa2 d) (`locater.penalty_minimum`), and leave every other
    parameter where it was."""
    kappa1, kappa2, target, steps = 100.0, 1.0, 12.0, 200
    config = _config(0.0)
    zero = lambda out, batch: (0.0 * jnp.sum(out), jnp.float32(1.0))  # noqa: E731
    task = dataclasses.replace(self.shared.task, loss=zero)
    o = config.opt
    tx = optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 0.05, 1, steps),
                     b1=o.b1, b2=o.b2, eps=o.eps, weight_decay=0.0)
    step = functools.partial(step_lib.train_step, task=task, tx=tx)
    batch, key = self.shared.batch(0), self.shared.dropout_key
    run = jax.jit(lambda s: jax.lax.fori_loop(
        0, steps, lambda _, s: step(s, batch, key)[0], s))
    params = jax.tree.map(jnp.asarray, self.shared.params0)
    state = run(step_lib.TrainState(
        step=jnp.zeros((), jnp.int32), params=params,
        opt_state=tx.init(params),
        hparams=locater.LocaterHParams(kappa1, kappa2, target)))
    d = config.model.d_model
    c = kappa2 * target / (kappa1 + kappa2 * d)
    after = _flat(state.params)
    w_qk = after.pop(W_QK)[0]
    self.assertGreater(np.max(np.abs(self.shared.params0["decoder"][
        "block_0"]["attn"]["w_qk"][0] - c * np.eye(d))), 0.1)
    np.testing.assert_allclose(w_qk, c * np.eye(d), atol=0.01 * c)
    star = locater.penalty_minimum(kappa1, kappa2, d, target)
    np.testing.assert_allclose(np.trace(w_qk), star.trace, rtol=1e-3)
    np.testing.assert_allclose(np.sum(w_qk**2), star.scale, rtol=2e-3)
    start = _flat(self.shared.params0)
    for name, value in after.items():
      np.testing.assert_array_equal(value, start[name], err_msg=name)


if __name__ == "__main__":
  absltest.main()
