r"""Where an attention layer keeps its query and key kernels, head by head.

Shapes: L = stacked layers, d = model width, H = heads, D = head width.

Flax, and Hugging Face's Flax models, project rows (:math:`q = x K_q`) and
split heads by reshaping the output axis, :math:`H D \to (H, D)`. Every
layout below comes down to query and key kernels [d, H, D] per layer:

==================================  ==============================  =========
parameters of a node                written by                      heads
==================================  ==============================  =========
query/kernel, key/kernel [d, H, D]  linen/nnx MultiHeadAttention    read
query/kernel, key/kernel [d, H*D]   HF BERT, RoBERTa, ViT; Dense    num_heads
c_attn/kernel [3d, d]               HF GPT-2 (`FlaxConv1D`)         num_heads
qkv/kernel [d, 3d]                  `nn.Dense(3 * d)`, split in 3   num_heads
qkv/kernel [d, 3, H, D]             `DenseGeneral((3, H, D))`       read
w_qk [H, d, d]                      qkspec's joint W_QK             read
==================================  ==============================  =========

(`qkv_proj` is read as `qkv`, maxtext's name.) A leading axis L is a stack of
layers (linen `nn.scan` with `variable_axes={"params": 0}`, nnx `vmap` or
`scan`): query/key [L, d, H, D], or [L, d, d] when `num_heads` is given,
is not the middle axis, and an `out` kernel beside them is [L, d, d] too;
c_attn [L, 3d, d]; qkv [L, d, 3d] or [L, d, 3, H, D].

Fused kernels hold q, k, v in that order: GPT-2's `FlaxConv1D` computes
:math:`y = x K^\top` and `jnp.split(y, 3, axis=2)`, so :math:`K_q` =
`kernel[:d].T`; a [d, 3d] kernel is split the same way (`kernel[:, :d]`);
maxtext's fused projection takes `y[:, :, 0]` of `DenseGeneral((3, H, D))`.
A kernel that interleaves q, k, v per head (BLOOM's `query_key_value`,
[d, H*3*D]) is none of these: name its slices in `qk_spec`.
"""
# pylint: disable=invalid-name
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

# A kernel in `qk_spec`: its path ("a/b/kernel") or a function of the
# parameter tree returning it (e.g. a slice of a fused QKV kernel).
KernelRef = str | Callable[[Any], jax.Array]
QKSpec = Mapping[str, tuple[KernelRef, KernelRef]]
NumHeads = int | Mapping[str, int] | None

LOOKED_FOR = (
    "a node with `query/kernel` and `key/kernel` of one shape (linen/nnx "
    "MultiHeadAttention, Hugging Face BERT/RoBERTa/ViT), `c_attn/kernel` "
    "[3d, d] (Hugging Face GPT-2), `qkv/kernel` or `qkv_proj/kernel` [d, 3d] "
    "or [d, 3, H, D], or a `w_qk` [H, d, d] (qkspec's joint W_QK), each "
    "optionally stacked over layers on a leading axis")
_FUSED = ("qkv", "qkv_proj")
_MAX_LISTED = 40          # parameter paths an error message lists


class Kernels(NamedTuple):
  """The query and key kernels of one attention layer, [d, H, D] each."""
  query: jax.Array
  key: jax.Array


def join_path(path: tuple) -> str:
  """A parameter or module path as its parts joined by "/"."""
  return "/".join(str(p) for p in path)


def _leaves(tree: Mapping, prefix: tuple = ()) -> Iterator[tuple[str, Any]]:
  """(path, leaf) of every leaf, paths joined by "/"."""
  for name, value in tree.items():
    if isinstance(value, Mapping):
      yield from _leaves(value, prefix + (name,))
    else:
      yield join_path(prefix + (name,)), value


def seen(tree: Mapping) -> str:
  """The parameter paths of `tree` with their shapes, for error messages."""
  rows = [f"{p} {tuple(np.shape(v))}" for p, v in _leaves(tree)]
  more = len(rows) - _MAX_LISTED
  rows = rows[:_MAX_LISTED] + ([f"... and {more} more"] if more > 0 else [])
  return "\n  ".join(["parameter paths seen:"] + (rows or ["(none)"]))


def _kernel(node: Any) -> Any:
  return node.get("kernel") if isinstance(node, Mapping) else None


def heads_of(num_heads: NumHeads, path: str) -> int | None:
  """The head count `num_heads` gives the layer at `path`, or None."""
  h = num_heads.get(path) if isinstance(num_heads, Mapping) else num_heads
  if h is not None and (isinstance(h, bool) or not isinstance(
      h, (int, np.integer)) or h < 1):
    raise ValueError(f"num_heads for {path!r} must be a positive int, got "
                     f"{h!r}.")
  return None if h is None else int(h)


def _need_heads(path: str, shape: tuple, heads: int | None, what: str) -> int:
  """`heads`, or ValueError naming `num_heads` and `path`."""
  if heads is None:
    raise ValueError(
        f"{path!r}: {what} {shape} do not say how many heads they hold; pass "
        f"num_heads= (an int, or {{{path!r}: H}}), e.g. "
        "num_heads=model.config.num_attention_heads.")
  return heads


def _split_heads(path: str, k: jax.Array, heads: int) -> jax.Array:
  """[..., d, H*D] -> [..., d, H, D], as Flax and HF reshape the output."""
  if k.shape[-1] % heads:
    raise ValueError(f"{path!r}: num_heads={heads} does not divide the "
                     f"kernels' output axis of {k.shape[-1]} ({k.shape}).")
  return k.reshape(*k.shape[:-1], heads, k.shape[-1] // heads)


def _check_heads(path: str, q: jax.Array, heads: int | None) -> None:
  if heads is not None and q.shape[-2] != heads:
    raise ValueError(f"{path!r}: num_heads={heads}, but its kernels "
                     f"{q.shape} ([..., d, H, D]) hold {q.shape[-2]} heads.")


def _layers(path: str, q: jax.Array, k: jax.Array, stacked: bool
            ) -> dict[str, Kernels]:
  """One entry per layer: `path`, or `path/l` for layer l of a stack."""
  if not stacked:
    return {path: Kernels(q, k)}
  return {join_path((path, l) if path else (l,)): Kernels(q[l], k[l])
          for l in range(q.shape[0])}


def query_key(path: str, q: jax.Array, k: jax.Array, heads: int | None,
              out: Any = None) -> dict[str, Kernels]:
  """Separate query and key kernels: [d, H*D], [d, H, D], [L, d, d] or
  [L, d, H, D]. A 3-D kernel is [d, H, D] unless `heads` is given, is not
  its middle axis, and the kernel and `out` (the layer's output kernel, if
  any) are [L, d, d]."""
  if q.shape != k.shape:
    raise ValueError(f"{path!r}: query and key kernels differ in shape, "
                     f"{q.shape} and {k.shape} (grouped-query or "
                     "cross-attention of two widths is not covered).")
  if q.ndim == 2:
    h = _need_heads(path, q.shape, heads, "query/key kernels [d, H*D]")
    return _layers(path, _split_heads(path, q, h), _split_heads(path, k, h),
                   False)
  if q.ndim == 3:
    if (heads is not None and heads != q.shape[1] == q.shape[2]
        and (out is None or np.shape(out) == q.shape)):
      return _layers(path, _split_heads(path, q, heads),
                     _split_heads(path, k, heads), True)
    _check_heads(path, q, heads)
    return _layers(path, q, k, False)
  if q.ndim == 4:
    _check_heads(path, q, heads)
    if np.ndim(out) == 4 and np.shape(out)[:3] != (q.shape[0], *q.shape[2:]):
      raise ValueError(
          f"{path!r}: query kernel {q.shape} and out kernel {np.shape(out)} "
          "are no stack [L, d, H, D], [L, H, D, d]: the stacked axis must "
          "come first (pass qk_spec with functions that move it).")
    return _layers(path, q, k, True)
  raise ValueError(f"{path!r}: query/key kernels must be 2-, 3- or 4-D "
                   f"([d, H*D], [d, H, D], [L, d, d], [L, d, H, D]), got "
                   f"{q.shape}.")


def c_attn(path: str, kernel: jax.Array, heads: int | None
           ) -> dict[str, Kernels]:
  """GPT-2's fused kernel [3d, d] or [L, 3d, d] (`FlaxConv1D`: features
  first, applied transposed; q, k, v = `jnp.split(x @ kernel.T, 3)`)."""
  d = kernel.shape[-1]
  h = _need_heads(path, kernel.shape, heads, "c_attn kernels [3d, d]")
  q, k = (_split_heads(path, jnp.swapaxes(kernel[..., i * d:(i + 1) * d, :],
                                          -1, -2), h) for i in (0, 1))
  return _layers(path, q, k, kernel.ndim == 3)


def qkv(path: str, kernel: jax.Array, heads: int | None
        ) -> dict[str, Kernels]:
  """A fused kernel in q, k, v order: [d, 3d] or [L, d, 3d]
  (`jnp.split(x @ kernel, 3, axis=-1)`), [d, 3, H, D] or [L, d, 3, H, D]
  (`DenseGeneral((3, H, D))`, q = output[..., 0, :, :])."""
  if kernel.ndim in (2, 3):
    h = _need_heads(path, kernel.shape, heads, "qkv kernels [d, 3d]")
    m = kernel.shape[-1] // 3
    q, k = (_split_heads(path, kernel[..., i * m:(i + 1) * m], h)
            for i in (0, 1))
    return _layers(path, q, k, kernel.ndim == 3)
  q, k = kernel[..., 0, :, :], kernel[..., 1, :, :]
  _check_heads(path, q, heads)
  return _layers(path, q, k, kernel.ndim == 5)


def _is_fused(name: str, kernel: Any) -> bool:
  shape, ndim = np.shape(kernel), np.ndim(kernel)
  if name == "c_attn":
    return ndim in (2, 3) and shape[-2] == 3 * shape[-1]
  if ndim in (2, 3):
    return shape[-1] % 3 == 0
  return ndim in (4, 5) and shape[-3] == 3


def match(node: Mapping, path: str, num_heads: NumHeads
          ) -> dict[str, Kernels] | None:
  """The attention layers whose parameters `node` (at `path`) holds, by
  path, or None."""
  heads = heads_of(num_heads, path)
  q, k = _kernel(node.get("query")), _kernel(node.get("key"))
  if q is not None and k is not None:
    return query_key(path, jnp.asarray(q), jnp.asarray(k), heads,
                     _kernel(node.get("out")))
  kernel = _kernel(node.get("c_attn"))
  if kernel is not None and _is_fused("c_attn", kernel):
    return c_attn(path, jnp.asarray(kernel), heads)
  for name in _FUSED:
    kernel = _kernel(node.get(name))
    if kernel is not None and _is_fused(name, kernel):
      return qkv(path, jnp.asarray(kernel), heads)
  return None


def joint(node: Mapping, path: str, num_heads: NumHeads) -> jax.Array | None:
  """qkspec's joint W_QK [H, d, d] if `node` holds one, else None."""
  w_qk = node.get("w_qk")
  if np.ndim(w_qk) != 3 or np.shape(w_qk)[-1] != np.shape(w_qk)[-2]:
    return None
  heads = heads_of(num_heads, path)
  if heads is not None and heads != np.shape(w_qk)[0]:
    raise ValueError(f"{path!r}: num_heads={heads}, but its w_qk "
                     f"{np.shape(w_qk)} ([H, d, d]) holds "
                     f"{np.shape(w_qk)[0]} heads.")
  return jnp.asarray(w_qk)


def lookup(tree: Mapping, ref: KernelRef, name: str) -> Any:
  """The kernel `ref` names in `tree` (`qk_spec[name]`), as stored."""
  if callable(ref):
    return ref(tree)
  if not isinstance(ref, str):
    raise ValueError(f"qk_spec[{name!r}]: a kernel is a path or a function "
                     f"of the parameters, got {type(ref).__name__}.")
  node = tree
  for part in ref.split("/"):
    keys = {str(k): k for k in node} if isinstance(node, Mapping) else {}
    if part not in keys:
      raise ValueError(f"qk_spec[{name!r}]: no parameter {ref!r}.\n"
                       + seen(tree))
    node = node[keys[part]]
  if isinstance(node, Mapping):
    raise ValueError(f"qk_spec[{name!r}]: {ref!r} is a node, not a kernel "
                     f"(it holds {sorted(map(str, node))}).")
  return node


def from_spec(tree: Mapping, qk_spec: QKSpec, num_heads: NumHeads
              ) -> dict[str, Kernels]:
  """The layers `qk_spec` names: {name: (query kernel, key kernel)}."""
  found = {}
  for name, refs in qk_spec.items():
    if not (isinstance(refs, (tuple, list)) and len(refs) == 2):
      raise ValueError(f"qk_spec[{name!r}] must be a pair (query kernel, key "
                       f"kernel), got {refs!r}.")
    q_ref, k_ref = refs
    if isinstance(q_ref, str) and q_ref == k_ref:
      raise ValueError(f"qk_spec[{name!r}] names {q_ref!r} for both query "
                       "and key: a fused kernel needs its q and k slices "
                       "(functions of the parameters) or num_heads.")
    q, k = lookup(tree, q_ref, name), lookup(tree, k_ref, name)
    if q is k:
      raise ValueError(f"qk_spec[{name!r}]: the query and key functions "
                       "return the same array.")
    q, k = jnp.asarray(q), jnp.asarray(k)
    if q.ndim not in (2, 3, 4):
      raise ValueError(f"qk_spec[{name!r}]: kernels must be 2-, 3- or 4-D "
                       "([d, H*D], [d, H, D], [L, d, d], [L, d, H, D]), "
                       f"got {q.shape}.")
    found.update(query_key(name, q, k, heads_of(num_heads, name)))
  return found
