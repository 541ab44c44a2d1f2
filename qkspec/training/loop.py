r"""Training with LocATER (paper Secs. 6-7): state, steps and the loop.

Shapes: B=batch, T=tokens, L=layers, H=heads, d=width, N=sweep members.

The objective is the task loss plus the LocATER penalty summed over every
layer and head,

.. math:: J(\Theta) + \sum_{\ell, h} \kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK})
          + \kappa_2\,(\mathrm{tr}\,W_{QK} - \tau)^2,

with :math:`W_{QK}` from `qkspec.training.model.qk_matrices` and the penalty from
`qkspec.theory.locater.locater_penalty`; Adam(0.9, 0.999, 1e-8) with decoupled
weight decay 0.01, constant learning rate and no clipping, as the paper's
fairseq setup.

`train_step(state, batch, key) -> (state, metrics)` is pure and compiled
once with `jax.jit` over a ("data",) mesh of all devices: the batch sharded
on its leading axis, the state replicated and donated. The step's dropout key
is `fold_in(key, state.step)`. A vmapped sweep (`qkspec.training.sweep`) stacks the
states of its members and runs `jax.vmap(train_step)` in the same jit.
"""
# pylint: disable=invalid-name
import functools
import json
import os
import time
from typing import Any

from absl import logging
from flax import struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from qkspec.training import checkpoint as ckpt_lib
from qkspec.config import schema
from qkspec.theory import locater
from qkspec.training import metric_writer
from qkspec.training import model as model_lib
from qkspec.training import sweep as sweep_lib
from qkspec.training import tasks
from qkspec.training import layer_stats


class TrainState(struct.PyTreeNode):
  step: jax.Array           # int32 [], updates done
  params: Any
  opt_state: Any
  hparams: dict             # {"kappa1", "kappa2", "target"}: float32 []


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


def init_state(init_key: jax.Array, hparams: dict, *, task: tasks.Task,
               tx: optax.GradientTransformation) -> TrainState:
  params = task.model.init(init_key, task.example_inputs)["params"]
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=tx.init(params), hparams=hparams)


def locater_term(params, hparams) -> jax.Array:
  """The LocATER penalty summed over layers and heads (Sec. 6)."""
  w_qk_LxHxdxd = model_lib.qk_matrices(params)
  return jnp.sum(locater.locater_penalty(
      w_qk_LxHxdxd, hparams["kappa1"], hparams["kappa2"], hparams["target"]))


def objective(params, hparams, batch, dropout_key, *, task: tasks.Task,
              deterministic: bool = False):
  """(loss + penalty, (loss, penalty)); loss = mean over weighted items."""
  loss_sum, weight = task.summed_loss(params, batch,
                                     deterministic=deterministic,
                                     rngs={"dropout": dropout_key})
  loss = loss_sum / weight
  penalty = locater_term(params, hparams)
  return loss + penalty, (loss, penalty)


def train_step(state: TrainState, batch, key: jax.Array, *, task: tasks.Task,
               tx: optax.GradientTransformation):
  """One AdamW update on loss + LocATER. Returns (state, metrics)."""
  step_key = jax.random.fold_in(key, state.step)
  grad_fn = jax.value_and_grad(functools.partial(objective, task=task),
                               has_aux=True)
  (total, (loss, penalty)), grads = grad_fn(state.params, state.hparams,
                                            batch, step_key)
  updates, opt_state = tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  finite = jnp.isfinite(total) & jnp.all(jnp.stack(
      [jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)]))
  metrics = {"loss": loss, "penalty": penalty, "finite": finite,
             "grad_norm": optax.tree.norm(grads)}
  return state.replace(step=state.step + 1, params=params,
                       opt_state=opt_state), metrics


def eval_step(params, batch, *, task: tasks.Task) -> dict[str, jax.Array]:
  """Summed loss and weight of one (padded) eval batch, dropout off."""
  loss_sum, weight = task.summed_loss(params, batch, deterministic=True)
  return {"loss_sum": loss_sum, "weight": weight}


class Steps(struct.PyTreeNode):
  """The compiled functions of a run (vmapped over members for a sweep)."""
  mesh: Any = struct.field(pytree_node=False)
  task: Any = struct.field(pytree_node=False)
  init: Any = struct.field(pytree_node=False)      # (init_keys, hparams)
  train: Any = struct.field(pytree_node=False)     # (state, batch, keys)
  eval: Any = struct.field(pytree_node=False)      # (params, batch)
  measure: Any = struct.field(pytree_node=False)   # (params, batch)
  replicated: Any = struct.field(pytree_node=False)


def make_mesh() -> jax.sharding.Mesh:
  """A 1-D ("data",) mesh of all devices, with automatic (GSPMD) sharding."""
  return jax.make_mesh((jax.device_count(),), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,))


def member_batch(config) -> int:
  """Sweep members batched together (`config.sweep.member_batch`; -1: auto).

  Auto is every member at once (0, a plain vmap) on a GPU or TPU and one at
  a time (1, a loop inside the compiled step) on a CPU, where the batched
  logits blocks fall out of cache (bench/sweep.py).
  """
  batch = config.sweep.get("member_batch", -1)
  if batch >= 0:
    return batch
  return 1 if jax.default_backend() == "cpu" else 0


def build_steps(config, mesh=None) -> Steps:
  """Builds the task and the jit-compiled (vmapped if sweeping) functions."""
  mesh = mesh or make_mesh()
  replicated = jax.NamedSharding(mesh, jax.P())
  batch_sharding = jax.NamedSharding(mesh, jax.P("data"))
  task = tasks.make_task(config, batch_sharding)
  tx = make_optimizer(config.opt, config.num_steps)
  init = functools.partial(init_state, task=task, tx=tx)
  step = functools.partial(train_step, task=task, tx=tx)
  evaluate = functools.partial(eval_step, task=task)
  measure = functools.partial(layer_stats.measure, task=task)
  if sweep_lib.is_sweep(config):
    batch = member_batch(config)
    init = jax.vmap(init)
    step = sweep_lib.over_members(step, (0, None, 0), batch)
    evaluate = sweep_lib.over_members(evaluate, (0, None), batch)
    measure = sweep_lib.over_members(measure, (0, None), batch)
  return Steps(
      mesh=mesh, task=task, replicated=replicated,
      init=jax.jit(init, out_shardings=replicated),
      train=jax.jit(step, in_shardings=(replicated, batch_sharding,
                                        replicated),
                    out_shardings=(replicated, replicated), donate_argnums=0),
      eval=jax.jit(evaluate, in_shardings=(replicated, batch_sharding),
                   out_shardings=replicated),
      measure=jax.jit(measure, in_shardings=(replicated, batch_sharding),
                      out_shardings=replicated))


def _host_step(state) -> int:
  """state.step as an int (the same for every sweep member)."""
  return int(np.asarray(jax.device_get(state.step)).reshape(-1)[0])


def _member_view(tree, i: int | None):
  return tree if i is None else jax.tree.map(lambda x: x[i], tree)


def _check_finite(pending: list[tuple[int, dict]], names: list[str]):
  """Raises FloatingPointError naming the first step with NaN/Inf."""
  if not pending:
    return
  finite = np.asarray(jax.device_get([m["finite"] for _, m in pending]))
  if finite.all():
    return
  idx = np.argwhere(~finite)[0]
  step = pending[idx[0]][0]
  who = f" (sweep member {names[idx[1]]})" if finite.ndim > 1 else ""
  raise FloatingPointError(
      f"NaN/Inf in the loss or gradients at step {step}{who}: the update "
      f"from state.step={step} was not finite. The last good checkpoint is "
      f"kept.")


def _evaluate(steps: Steps, state) -> dict[str, np.ndarray]:
  out = {}
  for split, batches in steps.task.eval_splits.items():
    total = None
    for batch in batches():
      r = steps.eval(state.params, batch)
      total = r if total is None else jax.tree.map(jnp.add, total, r)
    total = jax.device_get(total)
    loss = total["loss_sum"] / np.maximum(total["weight"], 1e-30)
    out[f"{split}/loss"] = loss
    if steps.task.kind == "lm":
      out[f"{split}/ppl"] = np.exp(loss)
  return out


def _fmt_time(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def train_and_evaluate(config, workdir: str) -> TrainState:
  """Trains `config` (one run or a vmapped sweep) in `workdir`; resumes.

  Writes `<workdir>/config.json`, `members.json` (name, directory and
  hyperparameters of each member; one member "run" in "." without a sweep),
  each member's `metrics.jsonl` (+ TensorBoard events if installed), and
  orbax checkpoints in `<workdir>/ckpt`.

  Returns:
    The final TrainState (leading member axis for a sweep).

  Raises:
    ValueError: a bad config (before training).
    FloatingPointError: NaN/Inf in loss or gradients, naming the step.
  """
  schema.validate(config)
  if config.multihost:
    jax.distributed.initialize()
  schema.validate(config, num_devices=jax.device_count())
  logging.info("devices: %s (process %d of %d)", jax.devices(),
               jax.process_index(), jax.process_count())
  steps = build_steps(config)
  members = sweep_lib.members(config)
  swept = sweep_lib.swept_keys(config)
  vmapped = bool(swept)
  names = [sweep_lib.member_name(m, swept) for m in members]
  dirs = [os.path.join(workdir, n) if vmapped else workdir for n in names]
  if vmapped:
    keys = [member_keys(m["seed"]) for m in members]
    init_keys = jnp.stack([k[0] for k in keys])
    dropout_keys = jnp.stack([k[1] for k in keys])
    hparams = sweep_lib.stacked_hparams(members)
  else:
    init_keys, dropout_keys = member_keys(members[0]["seed"])
    hparams = sweep_lib.hparams(members[0])
  dropout_keys = jax.device_put(dropout_keys, steps.replicated)

  lead = jax.process_index() == 0
  if lead:
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(config.to_json(indent=1))
    with open(os.path.join(workdir, "members.json"), "w") as f:
      json.dump([{"name": n, "dir": os.path.relpath(d, workdir), **m}
                 for n, d, m in zip(names, dirs, members)], f, indent=1)

  ckpt = ckpt_lib.Checkpointer(workdir, max_to_keep=config.max_to_keep,
                               save_interval_steps=config.checkpoint_every)
  latest = ckpt.latest_step()
  if latest is None:
    state = steps.init(init_keys, hparams)
  else:
    abstract = ckpt_lib.abstract_like(
        jax.eval_shape(steps.init, init_keys, hparams), steps.replicated)
    state, meta = ckpt.restore(latest, abstract)
    if meta["data_position"] != _host_step(state):
      raise ValueError(f"checkpoint {latest}: data position "
                       f"{meta['data_position']} != step {_host_step(state)}.")
    for k, v in jax.device_get(state.hparams).items():
      if not np.array_equal(np.asarray(v), np.asarray(hparams[k])):
        raise ValueError(f"{workdir} holds a run with other {k} values "
                         f"({v}); use a fresh workdir.")
    logging.info("resumed from step %d", latest)
  start = _host_step(state)

  writers = [metric_writer.MetricWriter(d, just_logging=not lead,
                                        console=False) for d in dirs]
  if start == 0:
    for w, m in zip(writers, members):
      w.write_hparams({**schema.flatten(config), **m})

  def log(step, pending, t_last, s_last):
    _check_finite(pending, names)
    rate = (step - s_last) / max(time.time() - t_last, 1e-9)
    train = {}
    if pending:
      got = jax.device_get([(m["loss"], m["penalty"], m["grad_norm"])
                            for _, m in pending])
      train = dict(zip(("train/loss", "train/penalty", "train/grad_norm"),
                       np.mean(np.asarray(got), axis=0)))
    meas = jax.device_get(steps.measure(state.params,
                                        steps.task.train_batch(step)))
    for i, w in enumerate(writers):
      scalars, arrays = layer_stats.flatten(
          _member_view(meas, i if vmapped else None))
      scalars.update({k: v[i] if vmapped else v for k, v in train.items()})
      if "train/loss" in scalars and steps.task.kind == "lm":
        scalars["train/ppl"] = np.exp(scalars["train/loss"])
      if pending:
        scalars["steps_per_sec"] = rate
      w.write_scalars(step, scalars)
      w.write_arrays(step, arrays)
    if pending:
      loss = np.atleast_1d(train["train/loss"])
      logging.info("step %d/%d  train/loss %s  %.2f steps/s  ETA %s", step,
                   config.num_steps, np.array2string(loss, precision=4),
                   rate, _fmt_time((config.num_steps - step) / rate))

  pending: list[tuple[int, dict]] = []
  t_last, s_last = time.time(), start
  step = start
  try:
    while True:
      if step == config.num_steps or (step % config.log_every == 0 and (
          step > start or start == 0)):
        log(step, pending, t_last, s_last)
        pending, t_last, s_last = [], time.time(), step
      if step > start and (step % config.eval_every == 0
                           or step == config.num_steps):
        res = _evaluate(steps, state)
        logging.info("step %d eval: %s", step, {
            k: np.array2string(np.atleast_1d(v), precision=4)
            for k, v in res.items()})
        for i, w in enumerate(writers):
          w.write_scalars(step, {k: v[i] if vmapped else v
                                 for k, v in res.items()})
      if step > start and (step % config.checkpoint_every == 0
                           or step == config.num_steps):
        _check_finite(pending, names)
        ckpt.save(step, state, force=True)
        for w in writers:
          w.flush()
      if step >= config.num_steps:
        break
      batch = steps.task.train_batch(step)
      state, metrics = steps.train(state, batch, dropout_keys)
      pending.append((step, metrics))
      step += 1
  except KeyboardInterrupt:
    logging.warning("interrupted at step %d: saving a checkpoint", step)
    _check_finite(pending, names)
    ckpt.save(step, state, force=True)
    raise
  finally:
    ckpt.close()
    for w in writers:
      w.close()
  return state
