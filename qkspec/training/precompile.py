r"""Compiles a run's programs in the background while the run starts.

Shapes: N=sweep members, k=steps per call, B=batch.

Before its first update a run compiles, one after another on the main
thread: the state's initialisation, the per-layer measurements (the log at
step 0, `layer_stats.measure`), the k-step train call
(`qkspec.training.multi_step`), at the first evaluation each eval
split's program and at the first checkpoint the state's copy
(`actions.CheckpointAction`). Each waits for the one before, although
none needs another's result: only the shapes and shardings of its
arguments.

`start(steps, abstract_state, ...)` therefore lowers and compiles the
measurements, the train call, the eval programs and the copy on worker
threads, from the arguments' shapes and shardings
(`jax.ShapeDtypeStruct`), while the main thread initialises or restores
the state. XLA releases the GIL while it compiles, and jax's
ahead-of-time `lower(...).compile()` fills the same cache that `jit`
dispatch reads, so the first call of each program finds its executable
compiled (tests/precompile_test.py checks that no program compiles
twice and that the workers compiled them). `Warm` makes that first call
wait for its worker instead of compiling a second time.

Nothing changes in what is computed: the same jitted functions run on the
same arguments. Where a worker's compilation differs from the call's (a
resumed state restored onto other shardings, say), the call compiles its
own as before; a worker's error is raised by the first call.

What it saves is the compilation that would otherwise wait in line: on a
GPU host (many cores, each XLA compilation largely serial) the
measurements' and evaluations' compilation, seconds per run; on a 2-core
CPU, where XLA's compilation already uses both cores, little.
`config.precompile = False` turns it off.
"""
from concurrent import futures
import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp

from qkspec.training import actions


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


def wait(steps) -> None:
  """Waits for every compile `start` began for `steps` (its `Warm`
  functions; raises a worker's error)."""
  for field in dataclasses.fields(steps):
    fn = getattr(steps, field.name)
    if isinstance(fn, Warm):
      fn.wait()


def _compile(fn, *args) -> None:
  fn.lower(*args).compile()


def start(steps, abstract_state, dropout_keys: jax.Array, batch):
  """`steps` with its train, measure and eval programs compiling on threads.

  Args:
    steps: the run's `step.Steps`.
    abstract_state: the TrainState's ShapeDtypeStructs on its sharding
      (`checkpoint.abstract_like(jax.eval_shape(steps.init, ...))`).
    dropout_keys: the run's dropout keys, as the train calls get them.
    batch: a train batch (`steps.task.train_batch(0)`), for the shapes of
      the measurements' (and single steps') batch.

  Returns:
    `steps` with `train_many` (or `train` where a call runs one step),
    `measure` and `eval_many` wrapped in `Warm`.
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
  pool.submit(_compile, actions.device_copy, abstract_state)
  pool.shutdown(wait=False)          # the jobs run on; the threads then end
  return steps.replace(**{name: Warm(getattr(steps, name), pending)
                          for name, pending in jobs.items()})
