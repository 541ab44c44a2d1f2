r"""k training steps, or a whole eval split, per call of the compiled program.

Shapes: k=steps per call, m=eval batches per call, N=sweep members.

The batches are gathered on the device from the task's `device_feed`,
which saves the host a launch and a batch copy per step:

* `scan_train` scans `step_fn` over k steps. Each step is `step_fn` itself,
  so k steps in one call equal k calls bit for bit on a CPU
  (tests/training/multi_step_test.py); the metrics come back stacked [k, ...].
* `scan_eval` sums the loss and weight over eval batches in batch order.

Under a half-precision compute dtype the scan carries the decoder's
weights cast (`TrainState.copies`): each update writes them (fused into
AdamW), the next forward reads them (`use_copies`); the same values, and
the copies never leave the scan.
"""
import math

import jax
import jax.numpy as jnp

MAX_AUTO_STEPS = 250


def steps_per_call(config) -> int:
  """k: `config.steps_per_call` if >= 1, else 1 on a CPU and elsewhere the
  largest divisor <= `MAX_AUTO_STEPS` of gcd(log_every, eval_every,
  checkpoint_every), so every action falls on a call boundary."""
  k = int(config.get("steps_per_call", -1))
  if k >= 1:
    return k
  if jax.default_backend() == "cpu":
    return 1
  g = math.gcd(config.log_every, config.eval_every, config.checkpoint_every)
  return max(d for d in range(1, min(g, MAX_AUTO_STEPS) + 1) if g % d == 0)


def scan_train(step_fn, feed, batch_sharding, copies_dtype):
  """`train_many(state, consts, xs, keys) -> (state, metrics [k, ...])`:
  `step_fn(state, batch, keys)` on `feed.train_batch(consts, x)` for each
  host input x of `xs`; a `copies_dtype` other than float32 makes the scan
  carry the cast weights."""
  cast = jnp.dtype(copies_dtype) != jnp.float32

  def train_many(state, consts, xs, keys):
    like = []          # the step's metrics' structure and dtypes

    def body(state, x):
      batch = jax.lax.with_sharding_constraint(
          feed.train_batch(consts, x), batch_sharding)
      state, metrics = step_fn(state, batch, keys)
      like.append(jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape,
                                                              x.dtype),
                               metrics))       # no tracer leaves the scan
      return state, pack_metrics(metrics)
    if cast:
      state = state.replace(copies=copies(state.params, copies_dtype))
    state, packed = jax.lax.scan(body, state, xs)
    return ((state.replace(copies=None) if cast else state),
            unpack_metrics(packed, like[0]))
  return train_many


def pack_metrics(metrics) -> jax.Array:
  """A step's metrics, leaves of one shape, float32 or bool (which float32
  holds exactly), as one float32 array [metrics, ...] in tree order."""
  return jnp.stack([x.astype(jnp.float32) for x in jax.tree.leaves(metrics)])


def unpack_metrics(packed_kxMx___, like):
  """`pack_metrics`' arrays of k steps, [k, metrics, ...], as `like`'s
  structure and dtypes, each leaf [k, ...]."""
  leaves, tree = jax.tree.flatten(like)
  return jax.tree.unflatten(tree, [packed_kxMx___[:, i].astype(x.dtype)
                                   for i, x in enumerate(leaves)])


def scan_eval(eval_fn, feed, batch_sharding):
  """`eval_many(params, tokens, indices) -> {"loss_sum", "weight"}`: the
  sums of `eval_fn(params, batch)` over `indices` in order (indices past
  the split give zero-weight batches)."""
  def eval_many(params, tokens, indices):
    def one(index):
      return eval_fn(params, jax.lax.with_sharding_constraint(
          feed.eval_batch(tokens, index), batch_sharding))

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
  return jax.tree_util.tree_unflatten(treedef, out)
