r"""Where an attention layer keeps its query and key kernels, head by head.

Shapes: L = stacked layers, d = model width, N = query heads, K = key heads
(K = N: multi-head; K < N: grouped-query, query head h reading key head
h // (N/K); K = 1: multi-query), D = head width.

Flax, and Hugging Face's Flax models, project rows (:math:`q = x K_q`) and
split heads by reshaping the output axis, :math:`N D \to (N, D)`. Every
layout comes down to a query kernel [d, N, D] and a key kernel [d, K, D]
per layer (gemma's and MaxText's fused ones: `llm_layouts`):

======================================  ============================  =========
parameters of a node                    written by                    heads
======================================  ============================  =========
query/kernel [d, N, D], key [d, K, D]   flax MultiHeadAttention,      read
                                        MaxText
q_proj/kernel (or w) [d, N, D], k_proj  bonsai (Qwen3)                read
query/kernel, key/kernel [d, N*D],      HF BERT, RoBERTa, ViT;        num_heads
[d, K*D]; q_proj, k_proj likewise       bonsai Gemma 3, HF Llama
c_attn/kernel [3d, d]                   HF GPT-2 (`FlaxConv1D`)       num_heads
qkv/kernel [d, (N + 2K) D]              `nn.Dense`, split q, k, v     num_heads
qkv/kernel [d, 3, N, D]                 `DenseGeneral((3, N, D))`     read
w_qk [H, d, d]                          qkspec's joint W_QK           read
======================================  ============================  =========

Stacks of layers (scan over layers): query/key [L, d, N, D] (linen
`nn.scan` with `variable_axes={"params": 0}`, nnx `vmap`/`scan`) or
[d, L, N, D] (MaxText's `param_scan_axis=1`), told apart by the out kernel
beside them, [L, N, D, d] or [N, L, D, d], and refused where it does not
say; [L, d, N*D] given `num_heads`, when that is not the middle axis and an
`out` kernel beside them is [L, d, d] too; c_attn [L, 3d, d]; qkv
[L, d, (N + 2K) D] or [L, d, 3, N, D]. A layer comes out per index, "path/l".

Fused kernels hold q, k, v in that order: GPT-2's `FlaxConv1D` computes
:math:`y = x K^\top` and `jnp.split(y, 3, axis=2)`, so :math:`K_q` =
`kernel[:d].T`; a [d, (N + 2K) D] kernel is split at N D and (N + K) D
(`num_heads=(N, K)`; an int N means K = N, thirds). A kernel that
interleaves q, k, v per head (BLOOM's `query_key_value`, [d, H*3*D]) is none
of these: name its slices in `qk_spec`.
"""
# pylint: disable=invalid-name
from typing import Any, Callable, Iterator, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from qkspec.for_flax import qk_norm

# A kernel in `qk_spec`: its path ("a/b/kernel") or a function of the
# parameter tree returning it (e.g. a slice of a fused QKV kernel).
KernelRef = str | Callable[[Any], jax.Array]
QKSpec = Mapping[str, tuple[KernelRef, KernelRef]]
NumHeads = (int | tuple[int, int] | Mapping[str, int | tuple[int, int]]
            | None)

LOOKED_FOR = (
    "a node with `query/kernel` and `key/kernel` (flax MultiHeadAttention, "
    "MaxText, Hugging Face BERT/RoBERTa/ViT) or `q_proj` and `k_proj` "
    "(bonsai), `q_einsum/w` with `kv_einsum/w` or `k_einsum/w`, or "
    "`qkv_einsum/w` (gemma), `c_attn/kernel` [3d, d] (Hugging Face GPT-2), "
    "`qkv/kernel` [d, (N + 2K) D] or [d, 3, N, D], `qkv_proj/kernel` "
    "[d, N + 2K, D] beside `out/kernel` (MaxText), or a `w_qk` [H, d, d] "
    "(qkspec's joint W_QK), each optionally stacked over layers")
_PAIRS = (("query", "key", "out"), ("q_proj", "k_proj", "o_proj"))
_MAX_LISTED = 40          # parameter paths an error message lists


class Kernels(NamedTuple):
  """The query [d, N, D] and key [d, K, D] kernels of one attention layer
  and their QK-norms, if any (`qk_norm.fold` folds them in)."""
  query: jax.Array
  key: jax.Array
  query_norm: qk_norm.Norm | None = None
  key_norm: qk_norm.Norm | None = None


class Projections(NamedTuple):
  """A node's query [d, N, D] and key [d, K, D] kernels, or a stack of
  them with the layer axis L at `axis` (0 or 1; None: one layer)."""
  query: jax.Array
  key: jax.Array
  axis: int | None


class Heads(NamedTuple):
  """Head counts given by `num_heads`: query heads N and, if given, key
  heads K."""
  query: int
  key: int | None


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


def kernel(node: Any) -> Any:
  """The kernel of a projection node: its `kernel` (flax) or `w` (gemma's
  and bonsai's einsums), else None."""
  if not isinstance(node, Mapping):
    return None
  return node.get("kernel", node.get("w"))


def _count(path: str, value: Any) -> int:
  if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or (
      value < 1):
    raise ValueError(f"num_heads for {path!r} must be a positive int or a "
                     f"pair of them (query heads, key heads), got {value!r}.")
  return int(value)


def heads_of(num_heads: NumHeads, path: str) -> Heads | None:
  """The head counts `num_heads` gives the layer at `path`, or None."""
  h = num_heads.get(path) if isinstance(num_heads, Mapping) else num_heads
  if h is None:
    return None
  if isinstance(h, (tuple, list)):
    if len(h) != 2:
      _count(path, h)
    heads = Heads(_count(path, h[0]), _count(path, h[1]))
    if heads.query % heads.key:
      raise ValueError(f"num_heads for {path!r}: key heads {heads.key} do "
                       f"not divide query heads {heads.query}.")
    return heads
  return Heads(_count(path, h), None)


def _need_heads(path: str, shape: tuple, heads: Heads | None,
                what: str) -> Heads:
  """`heads`, or ValueError naming `num_heads` and `path`."""
  if heads is None:
    raise ValueError(
        f"{path!r}: {what} {shape} do not say how many heads they hold; pass "
        f"num_heads= (an int, a pair (query heads, key heads), or {{{path!r}:"
        " ...}), e.g. num_heads=model.config.num_attention_heads.")
  return heads


def _split_heads(path: str, k: jax.Array, heads: int) -> jax.Array:
  """[..., d, H*D] -> [..., d, H, D], as Flax and HF reshape the output."""
  if k.shape[-1] % heads:
    raise ValueError(f"{path!r}: num_heads={heads} does not divide the "
                     f"kernels' output axis of {k.shape[-1]} ({k.shape}).")
  return k.reshape(*k.shape[:-1], heads, k.shape[-1] // heads)


def check_pair(path: str, q_shape: tuple, k_shape: tuple,
               heads: Heads | None) -> None:
  """ValueError unless query [d, N, D] and key [d, K, D] (one layer's
  shapes) hold K dividing N heads, and as many as `heads` says."""
  (d, N, D), k_shape = tuple(q_shape), tuple(k_shape)
  K = k_shape[1] if len(k_shape) == 3 else 0
  if K < 1 or (k_shape[0], k_shape[2]) != (d, D) or N % K:
    raise ValueError(f"{path!r}: query and key kernels {q_shape} and "
                     f"{k_shape} are no [d, N, D] and [d, K, D] with K "
                     "dividing N (cross-attention of two widths is not "
                     "covered).")
  if heads is not None and (heads.query != N or heads.key not in (None, K)):
    given = heads.query if heads.key is None else tuple(heads)
    raise ValueError(f"{path!r}: num_heads={given}, but its kernels "
                     f"{q_shape} and {k_shape} ([d, N, D], [d, K, D]) hold "
                     f"{N} query heads and {K} key heads.")


def _merged(path: str, q: jax.Array, k: jax.Array, heads: Heads
            ) -> tuple[jax.Array, jax.Array]:
  """[..., d, N*D] and [..., d, K*D] kernels split into heads: N from
  `heads`, K from the key kernel's width (checked against `heads.key`)."""
  q = _split_heads(path, q, heads.query)
  D = q.shape[-1]
  if k.shape[-1] % D:
    raise ValueError(f"{path!r}: key kernel {k.shape} holds no whole number "
                     f"of heads of width {D} (the query kernel {q.shape} "
                     f"split in num_heads={heads.query}).")
  k = k.reshape(*k.shape[:-1], k.shape[-1] // D, D)
  check_pair(path, q.shape[-3:], k.shape[-3:], heads)
  return q, k


def _stack_axis(path: str, q: jax.Array, out: Any) -> int:
  """The layer axis of a stacked query kernel [L, d, N, D] or [d, L, N, D],
  from the out kernel beside it ([L, N, D, e] or [N, L, D, e])."""
  a, b, N, D = q.shape
  o = tuple(np.shape(out)) if out is not None else None
  reads = [axis for axis, want in ((0, (a, N, D)), (1, (N, b, D)))
           if o is not None and len(o) == 4 and o[:3] == want]
  if len(reads) == 1:
    return reads[0]
  why = ("no out kernel beside it says which" if o is None else
         f"its out kernel {o} fits both" if reads else
         f"its out kernel {o} fits neither")
  raise ValueError(
      f"{path!r}: query kernel {q.shape} is a stack of layers on its first "
      "axis ([L, d, N, D], flax's nn.scan and nnx.vmap) or its second "
      f"([d, L, N, D], MaxText's scan), and {why}: pass qk_spec with "
      "functions that return [L, d, N, D].")


def query_key(path: str, q: jax.Array, k: jax.Array, heads: Heads | None,
              out: Any = None) -> Projections:
  """Separate query and key kernels: [d, N*D] and [d, K*D], [d, N, D] and
  [d, K, D], their stacks [L, d, N*D] (given `heads`, when N is not the
  middle axis and `out`, the layer's output kernel, is None or [L, d, d])
  and [L, d, N, D] or [d, L, N, D] (`out` tells which)."""
  if q.ndim != k.ndim:
    raise ValueError(f"{path!r}: query and key kernels {q.shape} and "
                     f"{k.shape} differ in rank.")
  if q.ndim == 2:
    h = _need_heads(path, q.shape, heads, "query/key kernels [d, N*D]")
    return Projections(*_merged(path, q, k, h), None)
  if q.ndim == 3:
    if (heads is not None and heads.query != q.shape[1] == q.shape[2]
        and (out is None or np.shape(out) == q.shape)):
      return Projections(*_merged(path, q, k, heads), 0)
    check_pair(path, q.shape, k.shape, heads)
    return Projections(q, k, None)
  if q.ndim == 4:
    axis = _stack_axis(path, q, out)
    check_pair(path, np.delete(q.shape, axis), np.delete(k.shape, axis),
               heads)
    return Projections(q, k, axis)
  raise ValueError(f"{path!r}: query/key kernels must be 2-, 3- or 4-D "
                   f"([d, N*D], [d, N, D], [L, d, d], [L, d, N, D]), got "
                   f"{q.shape}.")


def fused(path: str, kernel: jax.Array, heads: Heads | None, what: str
          ) -> tuple[jax.Array, jax.Array]:
  """The query [..., d, N, D] and key [..., d, K, D] kernels of a fused
  kernel [..., d, (N + 2K) D] in q, k, v order; K = N unless `heads`
  gives it."""
  h = _need_heads(path, kernel.shape, heads, what)
  N, K = h.query, h.key or h.query
  if kernel.shape[-1] % (N + 2 * K):
    raise ValueError(f"{path!r}: num_heads={tuple(h)} does not divide the "
                     f"fused kernel's output axis of {kernel.shape[-1]} "
                     f"({kernel.shape}) into N + 2K heads.")
  D = kernel.shape[-1] // (N + 2 * K)
  return (_split_heads(path, kernel[..., :N * D], N),
          _split_heads(path, kernel[..., N * D:(N + K) * D], K))


def c_attn(path: str, kernel: jax.Array, heads: Heads | None
           ) -> Projections:
  """GPT-2's fused kernel [3d, d] or [L, 3d, d] (`FlaxConv1D`: features
  first, applied transposed; q, k, v = `jnp.split(x @ kernel.T, 3)`)."""
  q, k = fused(path, jnp.swapaxes(kernel, -1, -2), heads,
               "c_attn kernels [3d, d]")
  return Projections(q, k, 0 if kernel.ndim == 3 else None)


def qkv(path: str, kernel: jax.Array, heads: Heads | None) -> Projections:
  """A fused kernel in q, k, v order: [d, (N + 2K) D] or its stack
  [L, d, (N + 2K) D] (`jnp.split` of `x @ kernel`), [d, 3, N, D] or
  [L, d, 3, N, D] (`DenseGeneral((3, N, D))`, q = output[..., 0, :, :])."""
  if kernel.ndim in (2, 3):
    q, k = fused(path, kernel, heads, "qkv kernels [d, (N + 2K) D]")
    return Projections(q, k, 0 if kernel.ndim == 3 else None)
  q, k = kernel[..., 0, :, :], kernel[..., 1, :, :]
  check_pair(path, q.shape[-3:], k.shape[-3:], heads)
  return Projections(q, k, 0 if kernel.ndim == 5 else None)


def projections(node: Mapping, path: str, heads: Heads | None
                ) -> Projections | None:
  """The query and key kernels of the flax and Hugging Face layouts
  (module docstring) that `node` (at `path`) holds, or None."""
  for q_name, k_name, out_name in _PAIRS:
    q, k = kernel(node.get(q_name)), kernel(node.get(k_name))
    if q is not None and k is not None:
      return query_key(path, jnp.asarray(q), jnp.asarray(k), heads,
                       kernel(node.get(out_name)))
  c = kernel(node.get("c_attn"))
  if np.ndim(c) in (2, 3) and np.shape(c)[-2] == 3 * np.shape(c)[-1]:
    return c_attn(path, jnp.asarray(c), heads)
  fused_kernel = kernel(node.get("qkv"))
  if np.ndim(fused_kernel) in (2, 3) or (
      np.ndim(fused_kernel) in (4, 5) and np.shape(fused_kernel)[-3] == 3):
    return qkv(path, jnp.asarray(fused_kernel), heads)
  return None


def per_layer(path: str, found: Projections,
              norms: tuple[qk_norm.Norm | None, qk_norm.Norm | None]
              ) -> dict[str, Kernels]:
  """One entry per layer: `path`, or `path/l` for layer l of a stack."""
  D = found.query.shape[-1]
  if found.axis is None:
    return {path: Kernels(found.query, found.key, *(
        qk_norm.layer_of(n, None, None, D, path) for n in norms))}
  return {join_path((path, l) if path else (l,)): Kernels(
      jnp.take(found.query, l, axis=found.axis),
      jnp.take(found.key, l, axis=found.axis),
      *(qk_norm.layer_of(n, l, found.axis, D, path) for n in norms))
          for l in range(found.query.shape[found.axis])}


def joint(node: Mapping, path: str, num_heads: NumHeads) -> jax.Array | None:
  """qkspec's joint W_QK [H, d, d] if `node` holds one, else None."""
  w_qk = node.get("w_qk")
  if np.ndim(w_qk) != 3 or np.shape(w_qk)[-1] != np.shape(w_qk)[-2]:
    return None
  heads = heads_of(num_heads, path)
  if heads is not None and heads.query != np.shape(w_qk)[0]:
    raise ValueError(f"{path!r}: num_heads={heads.query}, but its w_qk "
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
  """The layers `qk_spec` names: {name: (query kernel, key kernel)}, taken
  as the logits use them (fold any QK-norm gains into them)."""
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
                       "([d, N*D], [d, N, D], [L, d, d], [L, d, N, D]), "
                       f"got {q.shape}.")
    if q.ndim == 4:   # qk_spec's stacks are [L, d, N, D]
      check_pair(name, q.shape[1:], k.shape[1:], heads_of(num_heads, name))
      found.update(per_layer(name, Projections(q, k, 0), (None, None)))
    else:
      found.update(per_layer(name, query_key(
          name, q, k, heads_of(num_heads, name)), (None, None)))
  return found
