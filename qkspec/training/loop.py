r"""The training loop: set up a run, restore or initialise it, train it.

Shapes: N=sweep members (a leading axis of the state in a vmapped sweep).

`train_and_evaluate(config, workdir)` runs named steps:

1. `_setup`: checks the config, builds the compiled steps
   (`qkspec.training.step.build_steps`) and the sweep's members;
2. `_prepare_workdir`: writes `config.json` and `members.json`;
3. `_restore_or_init`: the latest checkpoint of `<workdir>/ckpt`, or a
   fresh state;
4. `_run`: the loop. Before each update (and after the last) every due
   periodic action runs, in order: `LogAction` (train metrics and the
   per-layer measurements of `qkspec.training.layer_stats`), `EvalAction`
   (valid/test loss) and `CheckpointAction`. Another action (progress lines,
   say) is one more object in `_actions`.

The checkpointer and the metric writers close on every exit (an ExitStack).
clu's `periodic_actions` would fit the actions, but importing it imports
clu's metric writers and so TensorFlow, which qkspec does not depend on
(see `qkspec.training.metric_writer`).
"""
# pylint: disable=invalid-name
import contextlib
import dataclasses
import json
import os
import time
from typing import Any

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import schema
from qkspec.theory import locater
from qkspec.training import checkpoint as ckpt_lib
from qkspec.training import layer_stats
from qkspec.training import metric_writer
from qkspec.training import step as step_lib
from qkspec.training import sweep as sweep_lib


@dataclasses.dataclass
class Run:
  """What a run is made of, built once by `_setup`."""
  config: Any
  workdir: str
  steps: step_lib.Steps
  members: list[dict]        # {seed, kappa1, kappa2, target} per member
  names: list[str]           # "run", or the swept values ("kappa2=0.1")
  dirs: list[str]            # each member's metrics directory
  vmapped: bool              # a sweep: the state has a leading member axis
  init_keys: jax.Array
  dropout_keys: jax.Array    # replicated on the mesh
  hparams: locater.LocaterHParams
  lead: bool                 # process 0 writes the files

  def member_view(self, tree, i: int):
    """Member `i`'s part of `tree` (the tree itself without a sweep)."""
    return jax.tree.map(lambda x: x[i], tree) if self.vmapped else tree


def _setup(config, workdir: str) -> Run:
  """Checks `config` and builds the steps and members (writes nothing)."""
  schema.validate(config)
  if config.multihost and not jax.distributed.is_initialized():
    # A command line may already have initialised it (--coordinator_address).
    jax.distributed.initialize()
  schema.validate(config, num_devices=jax.device_count())
  logging.info("devices: %s (process %d of %d)", jax.devices(),
               jax.process_index(), jax.process_count())
  steps = step_lib.build_steps(config)
  members = sweep_lib.members(config)
  swept = sweep_lib.swept_keys(config)
  vmapped = bool(swept)
  names = [sweep_lib.member_name(m, swept) for m in members]
  dirs = [os.path.join(workdir, n) if vmapped else workdir for n in names]
  init_keys, dropout_keys, hparams = step_lib.member_inputs(members, vmapped)
  return Run(config=config, workdir=workdir, steps=steps, members=members,
             names=names, dirs=dirs, vmapped=vmapped, init_keys=init_keys,
             dropout_keys=jax.device_put(dropout_keys, steps.replicated),
             hparams=hparams, lead=jax.process_index() == 0)


def _prepare_workdir(run: Run) -> None:
  """Writes `config.json` and `members.json` (process 0)."""
  if not run.lead:
    return
  os.makedirs(run.workdir, exist_ok=True)
  with open(os.path.join(run.workdir, "config.json"), "w") as f:
    f.write(run.config.to_json(indent=1))
  with open(os.path.join(run.workdir, "members.json"), "w") as f:
    json.dump([{"name": n, "dir": os.path.relpath(d, run.workdir), **m}
               for n, d, m in zip(run.names, run.dirs, run.members)], f,
              indent=1)


def _host_step(state) -> int:
  """state.step as an int (the same for every sweep member)."""
  return int(np.asarray(jax.device_get(state.step)).reshape(-1)[0])


def _restore_or_init(run: Run, ckpt: ckpt_lib.Checkpointer):
  """The state at the latest checkpoint, or a fresh one.

  Raises:
    ValueError: the checkpoint belongs to another run (other LocATER
      hyperparameters) or its data position is not its step.
  """
  latest = ckpt.latest_step()
  if latest is None:
    return run.steps.init(run.init_keys, run.hparams)
  # Checkpoints written when `hparams` was a {"kappa1", "kappa2", "target"}
  # dict restore as they are: orbax stores a NamedTuple by its field names.
  abstract = ckpt_lib.abstract_like(
      jax.eval_shape(run.steps.init, run.init_keys, run.hparams),
      run.steps.replicated)
  state, meta = ckpt.restore(latest, abstract)
  if meta["data_position"] != _host_step(state):
    raise ValueError(f"checkpoint {latest}: data position "
                     f"{meta['data_position']} != step {_host_step(state)}.")
  saved = jax.device_get(state.hparams)
  for name, have, want in zip(saved._fields, saved, run.hparams):
    if not np.array_equal(np.asarray(have), np.asarray(want)):
      raise ValueError(f"{run.workdir} holds a run with other {name} values "
                       f"({have}); use a fresh workdir.")
  logging.info("resumed from step %d", latest)
  return state


def _open_writers(run: Run, start: int,
                  stack: contextlib.ExitStack) -> list[Any]:
  """One metric writer per member, closed by `stack`; hparams at step 0."""
  writers = [stack.enter_context(metric_writer.MetricWriter(
      d, just_logging=not run.lead, console=False)) for d in run.dirs]
  if start == 0:
    for w, m in zip(writers, run.members):
      w.write_hparams({**schema.flatten(run.config), **m})
  return writers


class Pending:
  """Train metrics of the steps since the last log, still on the device."""

  def __init__(self, names: list[str]):
    self._names = names
    self.items: list[tuple[int, dict]] = []

  def add(self, step: int, metrics: dict) -> None:
    self.items.append((step, metrics))

  def take(self) -> list[tuple[int, dict]]:
    items, self.items = self.items, []
    return items

  def check_finite(self) -> None:
    """Raises FloatingPointError naming the first step with NaN/Inf."""
    if not self.items:
      return
    finite = np.asarray(jax.device_get([m["finite"] for _, m in self.items]))
    if finite.all():
      return
    idx = np.argwhere(~finite)[0]
    step = self.items[idx[0]][0]
    who = f" (sweep member {self._names[idx[1]]})" if finite.ndim > 1 else ""
    raise FloatingPointError(
        f"NaN/Inf in the loss or gradients at step {step}{who}: the update "
        f"from state.step={step} was not finite. The last good checkpoint "
        f"is kept.")


class PeriodicAction:
  """Runs every `every` steps after the start step, and at the last step."""

  def __init__(self, every: int, run: Run, start: int):
    self.every, self.run, self.start = every, run, start
    self.num_steps = run.config.num_steps

  def due(self, step: int) -> bool:
    return step > self.start and (step % self.every == 0
                                  or step == self.num_steps)

  def __call__(self, step: int, state) -> None:
    raise NotImplementedError


def _fmt_time(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


class LogAction(PeriodicAction):
  """Mean train metrics since the last log, measurements, steps/s."""

  def __init__(self, run: Run, start: int, pending: Pending, writers):
    super().__init__(run.config.log_every, run, start)
    self.pending, self.writers = pending, writers
    self._since = (time.time(), start)

  def due(self, step: int) -> bool:
    # Also at step 0 of a fresh run, and at the last step when resuming
    # there (measurements only).
    return step == self.num_steps or (step % self.every == 0 and (
        step > self.start or self.start == 0))

  def __call__(self, step: int, state) -> None:
    self.pending.check_finite()
    items = self.pending.take()
    t_last, s_last = self._since
    rate = (step - s_last) / max(time.time() - t_last, 1e-9)
    train = {}
    if items:
      got = jax.device_get([(m["loss"], m["penalty"], m["grad_norm"])
                            for _, m in items])
      train = dict(zip(("train/loss", "train/penalty", "train/grad_norm"),
                       np.mean(np.asarray(got), axis=0)))
    steps = self.run.steps
    meas = jax.device_get(steps.measure(state.params,
                                        steps.task.train_batch(step)))
    for i, w in enumerate(self.writers):
      scalars, arrays = layer_stats.flatten(self.run.member_view(meas, i))
      scalars.update({k: self.run.member_view(v, i)
                      for k, v in train.items()})
      if "train/loss" in scalars and steps.task.kind == "lm":
        scalars["train/ppl"] = np.exp(scalars["train/loss"])
      if items:
        scalars["steps_per_sec"] = rate
      w.write_scalars(step, scalars)
      w.write_arrays(step, arrays)
    if items:
      loss = np.atleast_1d(train["train/loss"])
      logging.info("step %d/%d  train/loss %s  %.2f steps/s  ETA %s", step,
                   self.num_steps, np.array2string(loss, precision=4),
                   rate, _fmt_time((self.num_steps - step) / rate))
    self._since = (time.time(), step)


def _evaluate(steps: step_lib.Steps, state) -> dict[str, np.ndarray]:
  """`{split}/loss` (and `/ppl` for an LM) over every eval split."""
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


class EvalAction(PeriodicAction):
  """Valid/test loss every `eval_every` steps."""

  def __init__(self, run: Run, start: int, writers):
    super().__init__(run.config.eval_every, run, start)
    self.writers = writers

  def __call__(self, step: int, state) -> None:
    res = _evaluate(self.run.steps, state)
    logging.info("step %d eval: %s", step, {
        k: np.array2string(np.atleast_1d(v), precision=4)
        for k, v in res.items()})
    for i, w in enumerate(self.writers):
      w.write_scalars(step, {k: self.run.member_view(v, i)
                             for k, v in res.items()})


class CheckpointAction(PeriodicAction):
  """A checkpoint every `checkpoint_every` steps, if the steps were finite."""

  def __init__(self, run: Run, start: int, pending: Pending,
               ckpt: ckpt_lib.Checkpointer, writers):
    super().__init__(run.config.checkpoint_every, run, start)
    self.pending, self.ckpt, self.writers = pending, ckpt, writers

  def __call__(self, step: int, state) -> None:
    self.pending.check_finite()
    self.ckpt.save(step, state, force=True)
    for w in self.writers:
      w.flush()


def _run(run: Run, state, start: int, actions: list[PeriodicAction],
         pending: Pending, ckpt: ckpt_lib.Checkpointer):
  """Trains from `start` to `config.num_steps`, running the due actions."""
  step = start
  try:
    while True:
      for action in actions:
        if action.due(step):
          action(step, state)
      if step >= run.config.num_steps:
        return state
      batch = run.steps.task.train_batch(step)
      state, metrics = run.steps.train(state, batch, run.dropout_keys)
      pending.add(step, metrics)
      step += 1
  except KeyboardInterrupt:
    logging.warning("interrupted at step %d: saving a checkpoint", step)
    pending.check_finite()
    ckpt.save(step, state, force=True)
    raise


def train_and_evaluate(config, workdir: str) -> step_lib.TrainState:
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
  run = _setup(config, workdir)
  _prepare_workdir(run)
  with contextlib.ExitStack() as stack:
    ckpt = stack.enter_context(contextlib.closing(ckpt_lib.Checkpointer(
        workdir, max_to_keep=config.max_to_keep,
        save_interval_steps=config.checkpoint_every)))
    state = _restore_or_init(run, ckpt)
    start = _host_step(state)
    writers = _open_writers(run, start, stack)
    pending = Pending(run.names)
    actions = [LogAction(run, start, pending, writers),
               EvalAction(run, start, writers),
               CheckpointAction(run, start, pending, ckpt, writers)]
    return _run(run, state, start, actions, pending, ckpt)
