r"""The decoder's weights cast to the compute dtype once per step, by the update.

Under a half-precision `compute_dtype` every matmul of the decoder casts its
float32 weight (the master copy AdamW updates) to bfloat16 first. On a GPU
XLA runs each cast as a kernel of its own, since the cast weight feeds two
matmuls (the forward's and the input gradient's): three a layer (the
attention's output projection, ffn1, ffn2) and one for q, k, v, in steps
that are bound by how many kernels they launch (bench/gpu_results.md
(12), (17)). Inside `multi_step.scan_train` the state carries the cast
copies instead (`TrainState.copies`): step t's update writes them (a cast
of the new weights, which XLA fuses into the AdamW kernels that already
read and write them) and step t + 1's forward reads them in place of its
casts. The values are the same casts of the same weights, so the
arithmetic is unchanged: the forward's matmuls see the same bfloat16
weights, and `use_copies` passes each copy's gradient on to its float32
weight cast back, as autodiff of the cast does (k scanned steps equal k
single steps bit for bit on a CPU: tests/multi_step_test.py).

Cast: the leaves under "decoder" named "kernel" or "w_qk" (every matrix
the decoder's modules cast; the LayerNorms and biases, the embedding and
the output projection are left to their own code). The copies never leave
the scan: `scan_train` adds them to its input state and removes them from
its output, so checkpoints and the other programs see the state as
before. With a float32 compute dtype there are none.
"""
import jax
import jax.numpy as jnp

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
