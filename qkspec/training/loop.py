r"""The training loop: set up a run, restore or initialise it, train it.

`train_and_evaluate(config, workdir)` runs:

1. `_setup`: checks the config (once) and refuses checkpoints of another
   config (`qkspec.config.resume`), both before it logs anything; makes
   its `sweep.Plan` and builds the compiled steps (which reads the data);
2. `_prepare_workdir`: writes `config.json` and `members.json`; the
   programs then compile on threads while the state is built
   (`config.precompile`);
3. `_restore_or_init`: the newest checkpoint that restores (damaged newer
   ones set aside), or a fresh state; metric records past it are dropped;
4. `_run`: k steps per compiled call where they fit (`multi_step`), and
   before each call the due actions in order: progress, log (train metrics
   and `layer_stats`, written while the next call computes), eval and
   checkpoint (`actions`).

Ctrl-C and SIGTERM stop every process at a call boundary with a checkpoint
(`preemption`); a second Ctrl-C interrupts at once. With several processes
(joined first by `processes.start`), each boundary and the checkpoints are
told to `peers`, which names them if another process is lost.
"""
# pylint: disable=invalid-name
import contextlib
import dataclasses
import json
import os

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.config import ConfigError
from qkspec.config import resume
from qkspec.config import schema
from qkspec.runtime import peers
from qkspec.theory import locater
from qkspec.training import actions as actions_lib
from qkspec.training import checkpoint as ckpt_lib
from qkspec.training import metric_writer
from qkspec.training import preemption
from qkspec.training import progress
from qkspec.training import step as step_lib
from qkspec.training import sweep


@dataclasses.dataclass(kw_only=True)
class Run:
  """What a run is made of, built once by `_setup`."""
  plan: sweep.Plan        # config, members, names, layout, mesh
  workdir: str
  steps: step_lib.Steps
  dirs: list[str]            # each member's metrics directory
  init_keys: jax.Array
  dropout_keys: jax.Array    # replicated on the mesh
  hparams: locater.LocaterHParams
  lead: bool                 # process 0 writes the files

  def member_view(self, tree, i: int):
    """Member `i`'s part of `tree` (the tree itself without a sweep)."""
    return jax.tree.map(lambda x: x[i], tree) if self.plan.vmapped else tree


def _setup(config, workdir: str) -> Run:
  """Checks `config` and the workdir's checkpoints, makes its plan and
  builds the steps, then logs the config (writes nothing)."""
  schema.validate(config)
  _check_resume(config, workdir)
  if config.multihost and not jax.distributed.is_initialized():
    raise ConfigError("config.multihost=True: join the processes first "
                      "(qkspec.runtime.processes.start; launch/train.py "
                      "does).")
  plan = sweep.make_plan(config)
  steps = step_lib.build_steps(plan)
  logging.info("config:\n%s", config)
  logging.info("devices: %s (process %d of %d)", jax.devices(),
               jax.process_index(), jax.process_count())
  dirs = [os.path.join(workdir, n) if plan.vmapped else workdir
          for n in plan.names]
  init_keys, dropout_keys, hparams = step_lib.member_inputs(plan)
  return Run(plan=plan, workdir=workdir, steps=steps, dirs=dirs,
             init_keys=init_keys,
             dropout_keys=_replicate(dropout_keys, steps.replicated),
             hparams=hparams, lead=jax.process_index() == 0)


def _replicate(x: jax.Array, sharding) -> jax.Array:
  """`x` (equal on every process) replicated on `sharding`, which
  `jax.device_put` cannot do onto other processes' devices."""
  if jax.process_count() == 1:
    return jax.device_put(x, sharding)
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    return jax.random.wrap_key_data(
        _replicate(jax.random.key_data(x), sharding),
        impl=jax.random.key_impl(x))
  return jax.make_array_from_process_local_data(sharding, np.asarray(x))


def _check_resume(config, workdir: str) -> None:
  """Raises ConfigError if `workdir` holds checkpoints of a config (its
  config.json) that differs beyond `qkspec.config.resume.SAFE`."""
  path = os.path.join(workdir, "config.json")
  ckpt_dir = os.path.join(workdir, "ckpt")
  if os.path.isfile(path) and os.path.isdir(ckpt_dir) and any(
      name.isdigit() for name in os.listdir(ckpt_dir)):
    with open(path) as f:
      resume.check(json.load(f), json.loads(config.to_json()), workdir)


def _prepare_workdir(run: Run) -> None:
  """Writes `config.json` and `members.json`."""
  path = os.path.join(run.workdir, "config.json")
  if not run.lead:
    return
  os.makedirs(run.workdir, exist_ok=True)
  with open(path, "w") as f:
    f.write(run.plan.config.to_json(indent=1))
  with open(os.path.join(run.workdir, "members.json"), "w") as f:
    json.dump([{"name": n, "dir": os.path.relpath(d, run.workdir), **m}
               for n, d, m in zip(run.plan.names, run.dirs,
                                  run.plan.members)], f,
              indent=1)


def _host_step(state) -> int:
  """state.step as an int (the same for every sweep member)."""
  return int(np.ravel(jax.device_get(state.step))[0])


def _abstract_state(run: Run, saved: bool = False):
  """The TrainState's shapes, dtypes and shardings as the steps carry it,
  or as a checkpoint holds it (`saved`: the real members)."""
  shapes = jax.eval_shape(run.steps.init, run.init_keys, run.hparams)
  if saved:
    return ckpt_lib.abstract_like(jax.eval_shape(run.steps.saved, shapes),
                                  run.steps.saved_sharding)
  return ckpt_lib.abstract_like(shapes, run.steps.state_sharding)


def _restore_or_init(run: Run, ckpt: ckpt_lib.Checkpointer):
  """The state at the newest checkpoint that restores, or a fresh one;
  ConfigError if it trained other LocATER hyperparameters (checkpoints that
  `_prepare_workdir` could not check: their config.json is gone)."""
  if ckpt.latest_step() is not None:
    found = ckpt.restore_newest(_abstract_state(run, saved=True))
    if found is not None:         # else every checkpoint was set aside
      step, state = found
      saved = jax.device_get(state.hparams)
      for name, have, want in zip(saved._fields, saved, run.hparams):
        if not np.array_equal(np.asarray(have), np.asarray(want)):
          raise ConfigError(f"{run.workdir} holds a run with other {name} "
                            f"values ({have}); use a fresh --workdir.")
      logging.info("resumed from step %d", step)
      return run.steps.unsaved(state)
  return run.steps.init(run.init_keys, run.hparams)


def _chunk_at(run: Run, step: int, actions) -> int:
  """Steps the next call runs: k = `steps_per_call` if `step` is a
  multiple of k and they end by the next step-counted action, else 1."""
  k = run.steps.steps_per_call
  stop = min([run.plan.config.num_steps] + [
      a.next_due(step) for a in actions if hasattr(a, "next_due")])
  if k > 1 and run.steps.train_many is not None and step % k == 0 and (
      step + k <= stop):
    return k
  return 1


def _run_rest(rest, clock: progress.PhaseClock) -> None:
  """Runs what the actions left, each in its phase."""
  for phase, left in rest:
    with clock.phase(phase):
      left()


def _run(run: Run, state, start: int, actions: list[actions_lib.PeriodicAction],
         pending: actions_lib.Pending, ckpt: ckpt_lib.Checkpointer,
         stop: preemption.StopFlag, clock: progress.PhaseClock):
  """Trains from `start` to `config.num_steps`, running the due actions.

  Wall time goes to `clock`: an action's to its phase once the state is
  ready, a compiled step's first call to "compile", other calls to "steps".
  What an action leaves runs while the next call computes.
  """
  step, boundary, compiled = start, None, set()
  try:
    while True:
      ready, rest = False, []
      for action in actions:
        if action.due(step):
          if not ready:        # the queued steps' time is "steps"
            with clock.phase("steps"):
              jax.block_until_ready(state)
            ready = True
          with clock.phase(action.phase):
            left = action.begin(step, state)
          if left is not None:
            rest.append((action.phase, left))
      boundary = step          # every action due at `step` has run
      peers.at_step(step)
      if step >= run.plan.config.num_steps or stop.at_boundary():
        _run_rest(rest, clock)
        if step >= run.plan.config.num_steps:
          return state
        raise KeyboardInterrupt
      k = _chunk_at(run, step, actions)
      with clock.phase("steps" if k in compiled else "compile"):
        if k > 1:
          feed = run.steps.task.feed
          state, metrics = run.steps.train_many(
              state, feed.consts, feed.train_inputs(step, k),
              run.dropout_keys)
          pending.add(step, metrics, count=k)
        else:
          batch = run.steps.task.train_batch(step)
          state, metrics = run.steps.train(state, batch, run.dropout_keys)
          pending.add(step, metrics)
      compiled.add(k)
      step += k
      _run_rest(rest, clock)   # while the call computes
  except KeyboardInterrupt:
    raise _save_interrupted(run, state, step, boundary, pending, ckpt,
                            stop) from None


def _save_interrupted(run: Run, state, step: int, boundary: int | None,
                      pending: actions_lib.Pending,
                      ckpt: ckpt_lib.Checkpointer,
                      stop: preemption.StopFlag) -> preemption.Interrupted:
  """Saves `state` if it is whole at the boundary `step` (not donated to a
  step that a second Ctrl-C stopped; with several processes, only at the
  agreed boundary: the save is collective); what to raise."""
  whole = boundary == step and (stop.stopping or jax.process_count() == 1)
  whole = whole and not any(x.is_deleted() for x in jax.tree.leaves(state)
                            if isinstance(x, jax.Array))
  if whole and _host_step(state) == step:
    pending.check_finite()
    ckpt.save(step, run.steps.real(state))
    ckpt.wait_until_finished()
    what = (f"{stop.describe(step)}: checkpoint {ckpt.step_dir(step)} "
            f"saved")
  else:
    what = (f"interrupted during step {step}: no checkpoint saved, "
            f"{ckpt.describe()}")
  return preemption.Interrupted(what, os.path.abspath(run.workdir),
                                stop.cause())


def train_and_evaluate(config, workdir: str) -> step_lib.TrainState:
  """Trains `config` (one run or a vmapped sweep) in `workdir`; resumes.

  Writes `config.json`, `members.json`, `run_info.jsonl` (a line per
  finished invocation), each member's `metrics.jsonl` (and TensorBoard
  events if installed) and checkpoints in `ckpt/`. Returns the final
  TrainState (leading member axis for a sweep). Raises ConfigError (a bad
  config, or checkpoints of another, before anything is written),
  RuntimeError (no checkpoint restores), FloatingPointError (NaN/Inf, with
  the step) or `preemption.Interrupted` (after saving a checkpoint).
  """
  clock = progress.PhaseClock()
  run = _setup(config, workdir)
  _prepare_workdir(run)
  if config.precompile:   # the programs compile on threads from here
    run.steps = step_lib.compile_ahead(
        run.steps, _abstract_state(run), run.dropout_keys,
        run.steps.task.train_batch(0))
  with contextlib.ExitStack() as stack:
    ckpt = stack.enter_context(contextlib.closing(ckpt_lib.Checkpointer(
        workdir, max_to_keep=config.max_to_keep)))
    peers.watch_checkpoints(ckpt.completed_step)
    state = _restore_or_init(run, ckpt)
    start, fresh = _host_step(state), ckpt.latest_step() is None
    writers = [stack.enter_context(w) for w in metric_writer.open_writers(
        run.dirs, -1 if fresh else start, run.lead)]
    if start == 0:
      for w, m in zip(writers, run.plan.members):
        w.write_hparams({**schema.flatten(config), **m})
    if start >= config.num_steps:
      logging.warning("%s is at step %d already (config.num_steps=%d): "
                      "nothing to train; raise --config.num_steps to train "
                      "on.", workdir, start, config.num_steps)
    else:
      pending = actions_lib.Pending(run.plan.names, ckpt.describe)
      log = actions_lib.LogAction(run, start, fresh, pending, writers)
      actions = [progress.ProgressAction(config.progress_every_s, start,
                                         config.num_steps, log.due),
                 log, actions_lib.EvalAction(run, start, writers),
                 actions_lib.CheckpointAction(run, start, pending, ckpt,
                                              writers)]
      clock.add("setup", clock.elapsed())
      with preemption.deferred_stop() as stop:
        try:
          state = _run(run, state, start, actions, pending, ckpt, stop,
                       clock)
        except preemption.Interrupted:
          if run.lead:                  # ends at the checkpoint it saved
            progress.record_invocation(run, start, ckpt.latest_step() or start,
                                      clock, interrupted=True)
          raise
    with clock.phase("finish"):
      ckpt.wait_until_finished()
    if run.lead:
      progress.record_invocation(run, start, _host_step(state), clock)
      logging.info("%s", clock.describe())
      logging.info("%s", progress.outputs_summary(run, ckpt))
  return run.steps.real(state)
