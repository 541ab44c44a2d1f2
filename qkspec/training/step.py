r"""One training step with LocATER (paper Secs. 6-7), compiled for a mesh.

Shapes: B=batch, T=tokens, L=layers, H=heads, d=width, N=sweep members.

The objective is the mean loss over the n targets of a batch plus the
LocATER penalty of every layer and head (`qkspec.theory.locater`, the
hyperparameters held in the state), times a static factor :math:`s`:

.. math:: \frac1n \sum_{i=1}^n \ell_i + s \sum_{\ell, h}
          \kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK})
          + \kappa_2\,(\mathrm{tr}\,W_{QK} - \tau)^2,

:math:`s = 1` as printed ("mean_loss"), :math:`s = 1/n` as fairseq
("summed_loss": penalty added to the summed loss, gradients divided by n);
a sweep may train both readings side by side. AdamW, constant learning
rate, no clipping, as the paper's fairseq setup.

`build_steps` jit-compiles `train_step(state, batch, key)` over the mesh of
a `sweep.Plan`: batch sharded over "data", state replicated and donated,
dropout key `fold_in(key, state.step)`; a sweep maps it over the stacked
members, sharded over "members" where the plan's layout says so.
"""
# pylint: disable=invalid-name
from concurrent import futures
import dataclasses
import functools
from typing import Any, Callable

from flax import struct
import jax
import jax.numpy as jnp
import optax

from qkspec.theory import locater
from qkspec.training import layer_stats
from qkspec.training import model as model_lib
from qkspec.training import multi_step
from qkspec.training import sweep as sweep_lib
from qkspec.training import tasks


class TrainState(struct.PyTreeNode):
  step: jax.Array           # int32 [], updates done
  params: Any
  opt_state: Any
  hparams: locater.LocaterHParams   # (kappa1, kappa2, target): float32 []
  # inside multi_step's scan only: the decoder's weights cast to the compute
  # dtype by the last update (`multi_step.copies`); None elsewhere
  copies: Any = None


def make_optimizer(opt) -> optax.GradientTransformation:
  """AdamW (decoupled weight decay) at the constant rate `opt.lr`."""
  return optax.adamw(opt.lr, b1=opt.b1, b2=opt.b2, eps=opt.eps,
                     weight_decay=opt.weight_decay)


def member_keys(seed) -> tuple[jax.Array, jax.Array]:
  """(init key, dropout key) of a run with `seed`."""
  return tuple(jax.random.split(jax.random.key(seed)))


def member_inputs(plan: sweep_lib.Plan
                  ) -> tuple[jax.Array, jax.Array, locater.LocaterHParams]:
  """(init keys, dropout keys, hparams) of the plan's members, on a
  leading member axis for a sweep, else the one member's."""
  per_member = [(*member_keys(m["seed"]), sweep_lib.hparams(m))
                for m in plan.members]
  return sweep_lib.stack(per_member) if plan.vmapped else per_member[0]


def init_state(init_key: jax.Array, hparams: locater.LocaterHParams, *,
               task: tasks.Task, tx: optax.GradientTransformation
               ) -> TrainState:
  params = task.model.init(init_key, task.example_inputs)["params"]
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=tx.init(params), hparams=hparams)


def locater_term(params, hparams: locater.LocaterHParams) -> jax.Array:
  """The LocATER penalty summed over layers and heads (Sec. 6)."""
  w_qk_LxHxdxd = model_lib.qk_matrices(params)
  return jnp.sum(locater.locater_penalty(
      w_qk_LxHxdxd, hparams.kappa1, hparams.kappa2, hparams.target))


def targets_per_batch(config) -> int:
  """n, the targets of one train batch (fairseq's `sample_size`): B T
  tokens for the LM and Dong et al.'s sorting / memorisation tasks, B
  sequences for the theory task (one target x_{T+1} each)."""
  n = config.data.batch_size
  return n * config.data.seq_len if config.task in ("lm", "synthetic") else n


def penalty_scale_of(config, added_to: str | None = None) -> float:
  """The static factor on the LocATER penalty, the reading of kappa: 1 for
  "mean_loss", 1 / `targets_per_batch` for "summed_loss". `added_to`: one
  sweep member's reading (None: `config.locater.penalty_added_to`)."""
  added_to = added_to or config.locater.penalty_added_to
  return 1.0 if added_to == "mean_loss" else 1.0 / targets_per_batch(config)


def penalty_scales(plan: sweep_lib.Plan) -> list[float]:
  """`penalty_scale_of` each member of the plan."""
  return [penalty_scale_of(plan.config, m["penalty_added_to"])
          for m in plan.members]


def objective(params, hparams: locater.LocaterHParams, batch, dropout_key, *,
              task: tasks.Task, deterministic: bool = False,
              penalty_scale: float = 1.0, copies=None):
  """(loss + penalty, (loss, penalty)): the mean loss over weighted items
  and `penalty_scale * locater_term` (as logged). `copies`: the decoder's
  weights already cast (`multi_step.copies`)."""
  model_params = (params if copies is None
                  else multi_step.use_copies(params, copies))
  loss_sum, weight = task.summed_loss(model_params, batch,
                                     deterministic=deterministic,
                                     rngs={"dropout": dropout_key})
  loss = loss_sum / weight
  penalty = penalty_scale * locater_term(params, hparams)
  return loss + penalty, (loss, penalty)


# Gradients of fewer elements than this have their squares summed in one
# reduction over all of them (`update_checks`); larger ones each alone.
FLAT_NORM_MAX = 2**18


def update_checks(total: jax.Array, grads) -> tuple[jax.Array, jax.Array]:
  """(finite, grad_norm): the gradients' global norm, and whether it and
  the objective are finite (a NaN or Inf anywhere, or a norm past
  float32's range, makes it not). The small gradients' squares are summed
  as one vector, which lets XLA fuse the optimizer on a GPU; the value is
  `optax.tree.norm`'s up to the order of the float32 sum."""
  leaves = jax.tree.leaves(grads)
  squares = lambda g: jnp.square(g.astype(jnp.float32))  # noqa: E731
  small = [squares(g).reshape(-1) for g in leaves if g.size < FLAT_NORM_MAX]
  sums = [jnp.sum(squares(g)) for g in leaves if g.size >= FLAT_NORM_MAX]
  if small:
    sums.append(jnp.sum(jnp.concatenate(small)))
  grad_norm = jnp.sqrt(functools.reduce(jnp.add, sums, jnp.float32(0)))
  return jnp.isfinite(total) & jnp.isfinite(grad_norm), grad_norm


def train_step(state: TrainState, batch, key: jax.Array, *, task: tasks.Task,
               tx: optax.GradientTransformation, penalty_scale: float = 1.0):
  """One AdamW update on loss + LocATER: (state, metrics); the static
  `penalty_scale` (`penalty_scale_of`) is in metrics["penalty"] too."""
  step_key = jax.random.fold_in(key, state.step)
  grad_fn = jax.value_and_grad(
      functools.partial(objective, task=task, penalty_scale=penalty_scale),
      has_aux=True)
  (total, (loss, penalty)), grads = grad_fn(state.params, state.hparams,
                                            batch, step_key,
                                            copies=state.copies)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  copies = (None if state.copies is None
            else multi_step.copies(params, task.model.config.dtype))
  finite, grad_norm = update_checks(total, grads)
  metrics = {"loss": loss, "penalty": penalty, "finite": finite,
             "grad_norm": grad_norm}
  return state.replace(step=state.step + 1, params=params,
                       opt_state=opt_state, copies=copies), metrics


def eval_step(params, batch, *, task: tasks.Task) -> dict[str, jax.Array]:
  """Summed loss and weight of one (padded) eval batch, dropout off."""
  loss_sum, weight = task.summed_loss(params, batch, deterministic=True)
  return {"loss_sum": loss_sum, "weight": weight}


def eval_call_size(num_batches: int) -> int:
  """Batches per compiled eval call: the whole split, or one on a CPU so
  that the progress meter can report."""
  return num_batches if jax.default_backend() != "cpu" else 1


@jax.jit
def device_copy(tree):
  """A copy of `tree` on its devices: `Steps.saved` where no member pads
  the state."""
  return jax.tree.map(jnp.copy, tree)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Steps:
  """The compiled functions of a run (over the members for a sweep): keys,
  hparams, metrics and measurements of the N real members, a state of
  `plan.layout.padded`; `saved` copies its real members for a checkpoint,
  `unsaved` pads them back, `real` is `saved` where members pad."""
  task: tasks.Task
  init: Callable                      # (init_keys, hparams) -> state
  train: Callable                     # (state, batch, keys) -> state, metrics
  eval: Callable                      # (params, batch)
  measure: Callable                   # (params, batch)
  replicated: jax.sharding.Sharding
  state_sharding: jax.sharding.Sharding
  saved: Callable                     # (state) -> real members
  saved_sharding: jax.sharding.Sharding
  unsaved: Callable                   # (saved) -> state
  real: Callable                      # (state) -> real members
  # k steps, and a split's eval, per call on batches built on the device
  # (multi_step; None without a feed): (state, feed.consts,
  # feed.train_inputs(step, k), keys), (params, feed.eval_tokens[s], indices)
  train_many: Callable | None = None
  eval_many: Callable | None = None
  steps_per_call: int = 1


def member_batch(config) -> int:
  """Sweep members batched per step (`config.sweep.member_batch`); -1 is
  0 (all, a vmap) on a GPU or TPU, 1 (a loop) on a CPU."""
  batch = config.sweep.get("member_batch", -1)
  if batch >= 0:
    return batch
  return 1 if jax.default_backend() == "cpu" else 0


def _member_functions(plan: sweep_lib.Plan, task: tasks.Task, tx
                      ) -> tuple[Callable, Callable, Callable, Callable]:
  """init, train, eval and measure of one run, or mapped over the plan's
  members (`sweep.padded_init`, `member_step`, `real_outputs`)."""
  init = functools.partial(init_state, task=task, tx=tx)
  scales = penalty_scales(plan)
  step = functools.partial(train_step, task=task, tx=tx,
                           penalty_scale=scales[0])
  evaluate = functools.partial(eval_step, task=task)
  measure = functools.partial(layer_stats.measure, task=task)
  if not plan.vmapped:
    return init, step, evaluate, measure
  batch, mesh, lay = member_batch(plan.config), plan.mesh, plan.layout
  return (sweep_lib.padded_init(jax.vmap(init), lay),
          sweep_lib.member_step(functools.partial(train_step, task=task,
                                                  tx=tx),
                                scales, batch, mesh, lay),
          sweep_lib.real_outputs(evaluate, batch, mesh, lay),
          sweep_lib.real_outputs(measure, batch, mesh, lay))


def _many(task: tasks.Task, step, evaluate, state_sharding, batch_sharding,
          replicated) -> dict[str, Any]:
  """The train_many and eval_many fields of `Steps` (none without a feed)."""
  many = {}
  if task.feed is not None:
    xs_sharding = getattr(task.feed, "ids_sharding", replicated)
    many["train_many"] = jax.jit(
        multi_step.scan_train(step, task.feed, batch_sharding,
                              copies_dtype=task.model.config.dtype),
        in_shardings=(state_sharding, replicated, xs_sharding, replicated),
        out_shardings=(state_sharding, replicated), donate_argnums=0)
  if task.feed is not None and task.feed.eval_counts:
    many["eval_many"] = jax.jit(
        multi_step.scan_eval(evaluate, task.feed, batch_sharding),
        in_shardings=(state_sharding, replicated, replicated),
        out_shardings=replicated)
  return many


def build_steps(plan: sweep_lib.Plan) -> Steps:
  """The task and the jit-compiled (member-mapped for a sweep) functions
  of `plan` on its mesh."""
  mesh, lay = plan.mesh, plan.layout
  replicated = jax.NamedSharding(mesh, jax.P())
  state_sharding = jax.NamedSharding(
      mesh, jax.P("members") if lay.groups > 1 else jax.P())
  batch_sharding = jax.NamedSharding(mesh, jax.P("data"))
  task = tasks.make_task(plan.config, batch_sharding)
  init, step, evaluate, measure = _member_functions(
      plan, task, make_optimizer(plan.config.opt))
  return Steps(
      task=task, replicated=replicated, state_sharding=state_sharding,
      **sweep_lib.saving(lay, device_copy, state_sharding, replicated),
      init=jax.jit(init, out_shardings=state_sharding),
      train=jax.jit(step, in_shardings=(state_sharding, batch_sharding,
                                        replicated),
                    out_shardings=(state_sharding, replicated),
                    donate_argnums=0),
      eval=jax.jit(evaluate, in_shardings=(state_sharding, batch_sharding),
                   out_shardings=replicated),
      measure=jax.jit(measure, in_shardings=(state_sharding, batch_sharding),
                      out_shardings=replicated),
      steps_per_call=multi_step.steps_per_call(plan.config),
      **_many(task, step, evaluate, state_sharding, batch_sharding,
              replicated))


class Warm:
  """A jitted function whose first call waits for its background compiles
  (its other attributes are the function's)."""

  def __init__(self, fn: Callable, pending: list[futures.Future]):
    self._fn, self._pending = fn, list(pending)

  def __call__(self, *args, **kwargs):
    self.wait()
    return self._fn(*args, **kwargs)

  def wait(self) -> None:
    """Waits for the background compiles; raises a worker's error, once."""
    while self._pending:
      self._pending.pop().result()

  def __getattr__(self, name):
    return getattr(self._fn, name)


def _compile(fn, *args) -> None:
  fn.lower(*args).compile()


def compile_ahead(steps, abstract_state, dropout_keys: jax.Array, batch):
  """`steps` with its train, measure and eval programs compiling on threads
  from `abstract_state` and `batch` (a train batch), each in a `Warm`."""
  pool = futures.ThreadPoolExecutor(max_workers=3,
                                    thread_name_prefix="precompile")
  feed, k = steps.task.feed, steps.steps_per_call
  jobs = {"measure": [pool.submit(_compile, steps.measure,
                                  abstract_state.params, batch)]}
  if k > 1 and steps.train_many is not None:
    jobs["train_many"] = [pool.submit(
        _compile, steps.train_many, abstract_state, feed.consts,
        feed.train_inputs(0, k), dropout_keys)]
  else:
    jobs["train"] = [pool.submit(_compile, steps.train, abstract_state,
                                 batch, dropout_keys)]
  if steps.eval_many is not None:
    jobs["eval_many"] = [
        pool.submit(_compile, steps.eval_many, abstract_state.params,
                    feed.eval_tokens[split],
                    jnp.zeros(eval_call_size(n), jnp.int32))
        for split, n in feed.eval_counts.items()]
  # last: the first checkpoint comes long after the first call and eval
  pool.submit(_compile, steps.saved, abstract_state)
  pool.shutdown(wait=False)          # the jobs run on; the threads then end
  return dataclasses.replace(steps, **{
      name: Warm(getattr(steps, name), pending)
      for name, pending in jobs.items()})
