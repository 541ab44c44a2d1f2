r"""One training step with LocATER (paper Secs. 6-7), compiled for a mesh.

Shapes: B=batch, T=tokens, L=layers, H=heads, d=width, N=sweep members.

The objective is the task loss plus the LocATER penalty summed over every
layer and head,

.. math:: J(\Theta) + \sum_{\ell, h} \kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK})
          + \kappa_2\,(\mathrm{tr}\,W_{QK} - \tau)^2,

with :math:`W_{QK}` from `qkspec.training.model.qk_matrices`, the penalty
from `qkspec.theory.locater.locater_penalty` and
:math:`(\kappa_1, \kappa_2, \tau)` a `qkspec.theory.locater.LocaterHParams`
held in the state; Adam(0.9, 0.999, 1e-8) with decoupled weight decay 0.01,
constant learning rate and no clipping, as the paper's fairseq setup.

Two readings of :math:`\kappa` (`config.locater.penalty_added_to`) differ
by one static factor :math:`s` on the penalty (`penalty_scale_of`); with
:math:`N` targets per batch and :math:`P` the penalty above,

.. math:: \frac1N \sum_{i=1}^N \ell_i + s\,P,\qquad
          s = 1 \text{ (mean\_loss)},\quad s = \frac1N \text{ (summed\_loss)}.

"mean_loss" is the paper's formula as printed. "summed_loss" is fairseq:
its criterion sums the loss (the penalty added to the sum) and its trainer
divides every gradient by the N targets per batch (B T = 4096 in the
paper). A sweep may list the reading per member (`sweep.penalty_added_to`):
then :math:`s` is a per-member constant mapped with the states, so both
readings train in one program on the same batches.

`train_step(state, batch, key) -> (state, metrics)` is pure and compiled
once with `jax.jit` over a ("data",) mesh of all devices: the batch sharded
on its leading axis, the state replicated and donated; the step's dropout
key is `fold_in(key, state.step)`. A sweep (`qkspec.training.sweep`) stacks
its members' states and maps `train_step` over them in the same jit; with
members sharded (`config.sweep.shard_members`, auto on several devices)
the mesh is ("members", "data"): the stacked state split over the
"members" axis, padded to a multiple of its size (`sweep.Layout`), each
batch split over "data" within every group of devices.
`build_steps` builds them all; `qkspec.training.loop` runs them.
"""
# pylint: disable=invalid-name
from concurrent import futures
import functools
from typing import Any, Callable

from flax import struct
import jax
import jax.numpy as jnp
import optax

from qkspec.theory import locater
from qkspec.training import actions
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


def make_optimizer(opt, num_steps: int) -> optax.GradientTransformation:
  """AdamW (decoupled weight decay) with a constant or warm-up schedule."""
  lr = opt.lr
  if opt.schedule == "warmup_constant":
    lr = optax.join_schedules([optax.linear_schedule(0.0, opt.lr,
                                                     opt.warmup_steps),
                               optax.constant_schedule(opt.lr)],
                              [opt.warmup_steps])
  elif opt.schedule == "warmup_cosine":
    lr = optax.warmup_cosine_decay_schedule(
        0.0, opt.lr, opt.warmup_steps, max(num_steps, opt.warmup_steps + 1),
        end_value=opt.lr * opt.min_lr_fraction)
  return optax.adamw(lr, b1=opt.b1, b2=opt.b2, eps=opt.eps,
                     weight_decay=opt.weight_decay)


def member_keys(seed) -> tuple[jax.Array, jax.Array]:
  """(init key, dropout key) of a run with `seed`."""
  init_key, dropout_key = jax.random.split(jax.random.key(seed))
  return init_key, dropout_key


def member_inputs(members: list[dict], stacked: bool
                  ) -> tuple[jax.Array, jax.Array, locater.LocaterHParams]:
  """(init keys, dropout keys, hparams) of `sweep.members(config)`.

  Stacked on a leading member axis for a vmapped sweep (`stacked`), else
  those of the one member.
  """
  per_member = [(*member_keys(m["seed"]), sweep_lib.hparams(m))
                for m in members]
  return sweep_lib.stack(per_member) if stacked else per_member[0]


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
  """N, the targets of one train batch (fairseq's `sample_size`).

  LM: `batch_size * seq_len` tokens (train weights are all 1); theory task:
  `batch_size` sequences, each with one target x_{T+1} (squared loss).
  """
  n = config.data.batch_size
  return n * config.data.seq_len if config.task == "lm" else n


def penalty_scale_of(config, added_to: str | None = None) -> float:
  """The static factor on the LocATER penalty: the reading of kappa.

  Args:
    config: a training config; `config.locater.penalty_added_to` is
      "mean_loss" (1: mean loss + kappa * penalty, as printed) or
      "summed_loss" (1 / `targets_per_batch`: fairseq adds the penalty to
      the summed loss and divides the gradients by the target count).
    added_to: that reading for one member of a sweep over readings
      (`sweep.members`' "penalty_added_to"); None: the config's.

  Returns:
    The factor `objective` multiplies the penalty by.
  """
  added_to = added_to or config.locater.penalty_added_to
  if added_to == "mean_loss":
    return 1.0
  if added_to == "summed_loss":
    return 1.0 / targets_per_batch(config)
  raise ValueError(f"config.locater.penalty_added_to must be 'mean_loss' or "
                   f"'summed_loss', got {added_to!r}.")


def penalty_scales(config) -> list[float]:
  """`penalty_scale_of` each member of `sweep.members(config)`: one value
  unless the sweep swept the reading (`sweep.penalty_added_to`)."""
  return [penalty_scale_of(config, m["penalty_added_to"])
          for m in sweep_lib.members(config)]


def objective(params, hparams: locater.LocaterHParams, batch, dropout_key, *,
              task: tasks.Task, deterministic: bool = False,
              penalty_scale: float = 1.0, copies=None):
  """(loss + penalty, (loss, penalty)); loss = mean over weighted items.

  `penalty` is `penalty_scale * locater_term(params, hparams)`, what enters
  the objective (and what is logged as train/penalty): with the fairseq
  reading already divided by the targets per batch. `copies`: the
  decoder's weights already cast (`multi_step.copies`), which the loss uses in
  place of casting them.
  """
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
  """(finite, grad_norm) of an update: the gradients' global norm, and
  whether the objective and every gradient are finite, read from that
  norm: a NaN or Inf anywhere makes the sum of squares NaN or Inf (and so
  does a norm past float32's range, ~1.8e19: as good as a blow-up).

  The squares of the small gradients (the layers') are summed as one flat
  vector, the large ones' (embedding, output) each by itself: on a GPU one
  fusion reads the small ones (XLA does not write the concatenation), where
  a reduction per parameter kept XLA from fusing the optimizer's kernels
  (15% fewer kernels in Fig. 12's step). Same value as `optax.tree.norm`
  up to the order of the float32 sum.
  """
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
  """One AdamW update on loss + LocATER. Returns (state, metrics).

  `penalty_scale` (static, from `penalty_scale_of(config)`) multiplies the
  penalty; metrics["penalty"] is the scaled penalty, as in the objective.
  """
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
            else multi_step.copies(params, task.model.dtype))
  finite, grad_norm = update_checks(total, grads)
  metrics = {"loss": loss, "penalty": penalty, "finite": finite,
             "grad_norm": grad_norm}
  return state.replace(step=state.step + 1, params=params,
                       opt_state=opt_state, copies=copies), metrics


def eval_step(params, batch, *, task: tasks.Task) -> dict[str, jax.Array]:
  """Summed loss and weight of one (padded) eval batch, dropout off."""
  loss_sum, weight = task.summed_loss(params, batch, deterministic=True)
  return {"loss_sum": loss_sum, "weight": weight}


class Steps(struct.PyTreeNode):
  """The compiled functions of a run (vmapped over members for a sweep).

  Keys, hparams, metrics and measurements are the N real members'; the
  state those functions carry has `layout.padded` members on
  `state_sharding`. `saved` gives (a copy of) its real members, the form
  a checkpoint holds (on `saved_sharding`); `unsaved` takes it back;
  `real` is `saved` where members pad the state, else the identity.
  """
  mesh: Any = struct.field(pytree_node=False)
  task: Any = struct.field(pytree_node=False)
  init: Any = struct.field(pytree_node=False)      # (init_keys, hparams)
  train: Any = struct.field(pytree_node=False)     # (state, batch, keys)
  eval: Any = struct.field(pytree_node=False)      # (params, batch)
  measure: Any = struct.field(pytree_node=False)   # (params, batch)
  replicated: Any = struct.field(pytree_node=False)
  layout: Any = struct.field(pytree_node=False)    # sweep.Layout
  state_sharding: Any = struct.field(pytree_node=False)
  saved: Any = struct.field(pytree_node=False)     # (state) -> real members
  saved_sharding: Any = struct.field(pytree_node=False)
  unsaved: Any = struct.field(pytree_node=False)   # (saved) -> state
  real: Any = struct.field(pytree_node=False)      # (state) -> real members
  # k steps per call on batches built on the device (multi_step):
  # (state, feed.consts, feed.train_inputs(step, k), keys), and a split's
  # eval batches (params, feed.eval_tokens[split], indices); None: no feed.
  train_many: Any = struct.field(pytree_node=False, default=None)
  eval_many: Any = struct.field(pytree_node=False, default=None)
  steps_per_call: int = struct.field(pytree_node=False, default=1)


def make_mesh(layout: sweep_lib.Layout | None = None) -> jax.sharding.Mesh:
  """The mesh of all devices, with automatic (GSPMD) sharding: ("data",),
  or ("members", "data") where `layout` shards the members."""
  if layout is None or layout.groups == 1:
    return jax.make_mesh((jax.device_count(),), ("data",),
                         axis_types=(jax.sharding.AxisType.Auto,))
  return jax.make_mesh((layout.groups, layout.data), ("members", "data"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)


def member_batch(config) -> int:
  """Sweep members batched together (`config.sweep.member_batch`; -1: auto).

  Auto is every member at once (0, a plain vmap) on a GPU or TPU and one at
  a time (1, a loop inside the compiled step) on a CPU, where the batched
  logits blocks fall out of cache.
  """
  batch = config.sweep.get("member_batch", -1)
  if batch >= 0:
    return batch
  return 1 if jax.default_backend() == "cpu" else 0


def build_steps(config, mesh=None) -> Steps:
  """Builds the task and the jit-compiled (vmapped if sweeping) functions.

  `mesh`: by default that of `config`'s `sweep.config_layout` on all
  devices; a given one (("data",), or ("members", "data")) sets it.
  """
  vmapped = sweep_lib.is_sweep(config)
  n = len(sweep_lib.members(config)) if vmapped else 1
  mesh = mesh or make_mesh(sweep_lib.config_layout(
      config, jax.device_count(), jax.process_count()))
  lay = sweep_lib.mesh_layout(mesh, n)
  replicated = jax.NamedSharding(mesh, jax.P())
  state_sharding = jax.NamedSharding(
      mesh, jax.P("members") if lay.groups > 1 else jax.P())
  batch_sharding = jax.NamedSharding(mesh, jax.P("data"))
  task = tasks.make_task(config, batch_sharding)
  tx = make_optimizer(config.opt, config.num_steps)
  init = functools.partial(init_state, task=task, tx=tx)
  scales = penalty_scales(config)
  step = functools.partial(train_step, task=task, tx=tx,
                           penalty_scale=scales[0])
  evaluate = functools.partial(eval_step, task=task)
  measure = functools.partial(layer_stats.measure, task=task)
  if vmapped:
    batch = member_batch(config)
    init = sweep_lib.padded_init(jax.vmap(init), lay)
    step = sweep_lib.member_step(functools.partial(train_step, task=task,
                                                   tx=tx),
                                 scales, batch, mesh, lay)
    evaluate = sweep_lib.real_outputs(evaluate, batch, mesh, lay)
    measure = sweep_lib.real_outputs(measure, batch, mesh, lay)
  many = {}
  if task.feed is not None:
    xs_sharding = getattr(task.feed, "ids_sharding", replicated)
    many["train_many"] = jax.jit(
        multi_step.scan_train(step, task.feed, batch_sharding,
                              copies_dtype=task.model.dtype),
        in_shardings=(state_sharding, replicated, xs_sharding, replicated),
        out_shardings=(state_sharding, replicated), donate_argnums=0)
  if task.feed is not None and task.feed.eval_counts:
    many["eval_many"] = jax.jit(
        multi_step.scan_eval(evaluate, task.feed, batch_sharding),
        in_shardings=(state_sharding, replicated, replicated),
        out_shardings=replicated)
  return Steps(
      mesh=mesh, task=task, replicated=replicated, layout=lay,
      state_sharding=state_sharding, **sweep_lib.saving(
          lay, actions.device_copy, state_sharding, replicated),
      init=jax.jit(init, out_shardings=state_sharding),
      train=jax.jit(step, in_shardings=(state_sharding, batch_sharding,
                                        replicated),
                    out_shardings=(state_sharding, replicated),
                    donate_argnums=0),
      eval=jax.jit(evaluate, in_shardings=(state_sharding, batch_sharding),
                   out_shardings=replicated),
      measure=jax.jit(measure, in_shardings=(state_sharding, batch_sharding),
                      out_shardings=replicated),
      steps_per_call=multi_step.steps_per_call(config), **many)


class Warm:
  """A jitted function whose first call waits for its background compiles.

  Attributes other than the call (`lower`, `trace`, ...) are the function's.
  """

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
  """`steps` with its train, measure and eval programs compiling on threads.

  A run would compile its programs one after another as each is first
  called, although none needs another's result. Here they lower and
  compile on worker threads from the arguments' shapes and shardings
  (`abstract_state`; `batch`, a train batch, for the batch's) while the
  main thread initialises or restores the state: XLA releases the GIL while
  it compiles, and `lower(...).compile()` fills the cache that `jit`
  dispatch reads. Each program is wrapped in `Warm`, so its first call
  waits for its worker instead of compiling it again; a worker's error is
  raised by that call. Nothing that is computed changes.
  """
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
                    jnp.zeros(actions.eval_call_size(n), jnp.int32))
        for split, n in feed.eval_counts.items()]
  # last: the first checkpoint comes long after the first call and eval
  pool.submit(_compile, steps.saved, abstract_state)
  pool.shutdown(wait=False)          # the jobs run on; the threads then end
  return steps.replace(**{name: Warm(getattr(steps, name), pending)
                          for name, pending in jobs.items()})
