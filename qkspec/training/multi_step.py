r"""k training steps, or a whole eval split, per call of the compiled program.

Shapes: k=steps per call, m=eval batches per call, N=sweep members.

A step dispatched from Python costs the host a launch, a batch built with
numpy and a copy to the device; on a GPU that is a large part of a small
model's step. Here the batches are built on the device from the task's
`device_feed` (`qkspec.training.device_feed`) and

* `scan_train(step_fn, feed)` returns `train_many(state, consts, xs, keys)`:
  a `jax.lax.scan` of `step_fn` over the k host inputs `xs` (block ids, or
  step numbers for the theory task), the batch of each step gathered inside
  the scan. The metrics come back stacked [k, ...] and stay on the device
  until a log or checkpoint reads them (written into one [k, metrics, ...]
  array by one kernel a step, where a stacked output each took a kernel of
  its own on a GPU, and split after the scan). Each step is `step_fn`
  itself, the same arithmetic in the same order, so k steps in one call
  equal k calls of `step_fn` bit for bit on a CPU (tests/multi_step_test.py);
* `scan_eval(eval_fn, feed)` returns `eval_many(params, tokens, indices)`:
  the summed loss and weight over the eval batches `indices`, accumulated
  in batch order as the per-batch path does.

Under a half-precision compute dtype every matmul of the decoder casts its
float32 weight (the master copy AdamW updates) to bfloat16, and on a GPU
each cast is a kernel of its own. Inside `scan_train` the state carries
those casts instead (`TrainState.copies`): step t's update writes them (a
cast that XLA fuses into the AdamW kernels that already read and write the
weights) and step t + 1's forward reads them (`use_copies`). Same casts of
the same weights, so the arithmetic is unchanged; the copies never leave
the scan, so checkpoints and the other programs see the state as before.

`steps_per_call(config)` chooses k: `config.steps_per_call` if >= 1, else
(auto) 1 on a CPU, where a step takes far longer than its dispatch, and
elsewhere the largest divisor of gcd(log_every, eval_every,
checkpoint_every) up to `MAX_AUTO_STEPS`, so every log, eval and
checkpoint falls on a call boundary. `qkspec.training.loop` runs chunks of
k steps between the steps where an action is due, and single steps only
where a chunk does not fit (an odd resume step, the tail of a run).
"""
import math

import jax
import jax.numpy as jnp

MAX_AUTO_STEPS = 250


def steps_per_call(config) -> int:
  """k: steps per compiled call (module docstring)."""
  k = int(config.get("steps_per_call", -1))
  if k >= 1:
    return k
  if jax.default_backend() == "cpu":
    return 1
  g = math.gcd(math.gcd(config.log_every, config.eval_every),
               config.checkpoint_every)
  return max(d for d in range(1, min(g, MAX_AUTO_STEPS) + 1) if g % d == 0)


def scan_train(step_fn, feed, batch_sharding=None, copies_dtype=None):
  """`train_many(state, consts, xs, keys) -> (state, metrics [k, ...])`.

  Args:
    step_fn: `(state, batch, keys) -> (state, metrics)` (a sweep's vmapped
      step, or one run's).
    feed: an `LMFeed` or `TheoryFeed`: `feed.train_batch(consts, x)` builds
      the batch of one step from its host input x.
    batch_sharding: where each gathered batch is laid out (its leading axis
      on the mesh's data axis), or None.
    copies_dtype: the model's compute dtype: other than float32, the scan
      carries the decoder's weights cast to it (`copies`: cast once before
      the first step, then by each update), none of which leaves it.
  """
  cast = copies_dtype is not None and jnp.dtype(copies_dtype) != jnp.float32

  def train_many(state, consts, xs, keys):
    like = []          # the step's metrics' structure and dtypes, if packed

    def body(state, x):
      batch = feed.train_batch(consts, x)
      if batch_sharding is not None:
        batch = jax.lax.with_sharding_constraint(batch, batch_sharding)
      state, metrics = step_fn(state, batch, keys)
      packed = pack_metrics(metrics)
      if packed is None:
        return state, metrics
      like.append(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape,
                                                              x.dtype),
                               metrics))       # no tracer leaves the scan
      return state, packed
    if cast:
      state = state.replace(copies=copies(state.params,
                                                        copies_dtype))
    state, metrics = jax.lax.scan(body, state, xs)
    if like:
      metrics = unpack_metrics(metrics, like[0])
    return (state.replace(copies=None) if cast else state), metrics
  return train_many


def pack_metrics(metrics):
  """A step's metrics as one float32 array [metrics, ...] (leaves in tree
  order), or None unless every leaf has the same shape and is float32 or
  bool (which float32 holds exactly)."""
  leaves = jax.tree.leaves(metrics)
  if (not leaves or len({x.shape for x in leaves}) != 1
      or any(x.dtype not in (jnp.float32, jnp.bool_) for x in leaves)):
    return None
  return jnp.stack([x.astype(jnp.float32) for x in leaves])


def unpack_metrics(packed_kxMx, like):
  """`pack_metrics`' arrays of k steps, [k, metrics, ...], as `like`'s
  structure and dtypes, each leaf [k, ...]."""
  leaves, tree = jax.tree.flatten(like)
  return jax.tree.unflatten(tree, [packed_kxMx[:, i].astype(x.dtype)
                                   for i, x in enumerate(leaves)])


def scan_eval(eval_fn, feed, batch_sharding=None):
  """`eval_many(params, tokens, indices) -> {"loss_sum", "weight"}`.

  `eval_fn(params, batch)` is the per-batch eval step; the sums are
  accumulated over `indices` in order (indices past the split give empty,
  zero-weight batches, so a last call may be padded).
  """
  def eval_many(params, tokens, indices):
    def one(index):
      batch = feed.eval_batch(tokens, index)
      if batch_sharding is not None:
        batch = jax.lax.with_sharding_constraint(batch, batch_sharding)
      return eval_fn(params, batch)

    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype),
                         jax.eval_shape(one, indices[0]))

    def body(total, index):
      return jax.tree.map(jnp.add, total, one(index)), None
    total, _ = jax.lax.scan(body, zeros, indices)
    return total
  return eval_many


# ------------------------------------------------- weights cast once ----

_CAST = ("kernel", "w_qk")


def _cast(path) -> bool:
  keys = [getattr(k, "key", None) for k in path]
  return bool(keys) and keys[0] == "decoder" and keys[-1] in _CAST


def copies(params, dtype) -> tuple[jax.Array, ...]:
  """The cast weights of `params` (any leading axes, e.g. members), in
  `jax.tree_util` order."""
  return tuple(x.astype(dtype) for path, x in
               jax.tree_util.tree_flatten_with_path(params)[0]
               if _cast(path))


@jax.custom_vjp
def _use(weight, copy):
  del weight
  return copy


def _use_forward(weight, copy):
  return copy, jnp.zeros((0,), weight.dtype)


def _use_backward(residual, g):
  return g.astype(residual.dtype), None


_use.defvjp(_use_forward, _use_backward)


def use_copies(params, cast) -> dict:
  """`params` with each cast weight replaced by its copy in `cast`
  (`copies`' order): the value the model's own cast would give, whose
  gradient reaches the float32 weight."""
  leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
  cast = iter(cast)
  out = [_use(x, next(cast)) if _cast(path) else x for path, x in leaves]
  if next(cast, None) is not None:
    raise ValueError("more weight copies than cast weights in params")
  return jax.tree_util.tree_unflatten(treedef, out)
