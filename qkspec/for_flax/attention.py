r"""Attention entropy, rho_i and rank collapse of any Flax attention model.

Shapes: B = batch, T = queries, S = keys, H = heads, D = head width,
d = width, L = stacked layers.

`attention_table` runs the model once, unmodified, and measures each
attention layer from its query, key, mask and output as it runs (linen:
`nn.intercept_methods`; nnx: a clone whose attention layers record
themselves), recomputing the logits :math:`\omega = q k^\top/\sqrt D` as
Flax's `dot_product_attention` does. A linen run is op by op
(`jax.disable_jit`), so a jitted `apply_fn` runs as if unjitted and its
compiled cache is left alone; an nnx clone is new to `nnx.jit`, which
traces it anew. Where a layer runs traced (`nn.remat`, `nnx.jit`,
`nnx.scan`), it sends its measurements out with `jax.debug.callback`. A
stack scanned over layers (`nn.scan`, `nnx.scan`) gives one set of rows per
layer, "path/l".

An error says what to do where a layer cannot be measured: attention
other than linen's `MultiHeadDotProductAttention` and nnx's
`MultiHeadAttention` (Hugging Face's: use `attention_table_from_weights`),
a model vmapped over the batch, one layer looped over (no stack),
`eval_shape`. Assumed, not checked: the layer's `attention_fn` is Flax's
`dot_product_attention`, and no decoding cache. A layer called twice, not
stacked, is measured on its last call.
"""
# pylint: disable=invalid-name
import functools
from typing import Any, Callable, Mapping

import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.for_flax import layouts
from qkspec.for_flax import qk
from qkspec.for_flax import stats
from qkspec.theory import softmax

# linen children of an attention layer whose outputs are its query and key
_PROJECTIONS = {"query": "query", "query_ln": "query", "key": "key",
                "key_ln": "key"}
_USE_WEIGHTS = ("; for attention it cannot see (Hugging Face's models), "
                "pass the model's attention probabilities "
                "(output_attentions=True) to attention_table_from_weights")


@functools.partial(jax.jit, static_argnames=("causal", "self_attention"))
def attention_stats(query: jax.Array, key: jax.Array, mask: jax.Array | None,
                    output: jax.Array, causal: bool = False,
                    self_attention: bool = True) -> dict[str, jax.Array]:
  r"""Per-head entropy and :math:`\rho_i`, and the output's rank collapse.

  Of query [..., T, H, D], key [..., S, H, D], mask None or [..., H, T, S]
  (broadcast; with `causal`, also j <= t) and output [..., T, d]: `entropy`
  [H] of :math:`\mathrm{softmax}(q_t^\top k_j/\sqrt D)` over the visible
  keys and `rho` [H, S] (Definition 1 on each sequence's last token), as
  `stats.head_stats`, and `rank_residual` [] (Dong's "mean" relative
  residual of the token rows, batch mean). Padded queries
  (`stats.query_tokens`) count in none of them.
  """
  batch = query.shape[:-3]
  (T, H, D), S = query.shape[-3:], key.shape[-3]
  q_BxTxHxD = query.reshape(-1, T, H, D).astype(jnp.float32)
  k_BxSxHxD = key.reshape(-1, S, H, D).astype(jnp.float32)
  logits_BxHxTxS = jnp.einsum("bthd,bshd->bhts", q_BxTxHxD,
                              k_BxSxHxD) / softmax.temperature(None, D)
  visible = jnp.broadcast_to(True if mask is None else mask.astype(bool),
                             (*batch, H, T, S))
  if causal:
    visible = visible & jnp.broadcast_to(jnp.tril(jnp.ones((T, S), bool)),
                                         visible.shape)
  visible_BxHxTxS = visible.reshape(logits_BxHxTxS.shape)
  ok_BxHxT = stats.query_tokens(visible_BxHxTxS, self_attention)
  out_BxTxd = output.reshape(-1, *output.shape[-2:])
  return dict(**stats.head_stats(logits_BxHxTxS, visible_BxHxTxS, ok_BxHxT),
              rank_residual=stats.rank_residual(out_BxTxd,
                                                jnp.any(ok_BxHxT, axis=1)))


class _Sink:
  """The measurements of each attention layer, by path, call by call."""

  def __init__(self):
    self.calls: dict[str, list[dict]] = {}   # measurements received
    self.started: dict[str, int] = {}        # calls seen, traced or not
    self.failed: dict[str, str] = {}         # why a callback was refused

  def _put(self, path: str, measured: dict) -> None:
    self.calls.setdefault(path, []).append(jax.device_get(measured))

  def measure(self, path: str, query, key, mask, output, causal: bool,
              self_attention: bool) -> None:
    """Measures one call of the layer at `path`, now if its values are
    concrete, else when the traced computation runs."""
    self.started[path] = self.started.get(path, 0) + 1
    with jax.disable_jit(False):
      measured = attention_stats(query, key, mask, output, causal=causal,
                                 self_attention=self_attention)
    if not qk.is_traced(measured):
      self._put(path, measured)
      return
    try:
      jax.debug.callback(functools.partial(self._put, path), measured,
                         ordered=True)
    except Exception as e:  # pylint: disable=broad-except
      self.failed[path] = f"{type(e).__name__}: {str(e).splitlines()[0]}"

  def check(self, path: str, stack: int | None) -> None:
    """ValueError unless the layer at `path` was measured once per call,
    or once per layer of its `stack`."""
    n, started = len(self.calls.get(path, ())), self.started.get(path, 0)
    if (n == stack) if stack is not None else (n == started):
      return
    why = f" ({self.failed[path]})" if path in self.failed else ""
    raise ValueError(
        f"attention layer {path!r} sent {n} measurements for {started} "
        f"calls{why}: it ran under a transformation attention_table "
        "cannot follow (jax.vmap, a loop over one layer, eval_shape); pass "
        "apply_fn without it" + _USE_WEIGHTS + ".")


def _is_self_attention(call_args: tuple, call_kwargs: dict) -> bool:
  inputs_q = call_args[0] if call_args else call_kwargs.get("inputs_q")
  inputs_k = (call_args[1] if len(call_args) > 1
              else call_kwargs.get("inputs_k", call_kwargs.get("inputs_kv")))
  return inputs_k is None or inputs_k is inputs_q


def _run_linen(apply_fn: Callable, variables: Any, args, kwargs,
               sink: _Sink) -> None:
  """Runs `apply_fn(variables, *args, **kwargs)`, measuring every call of a
  linen `MultiHeadDotProductAttention` (or subclass)."""
  pending = {}     # path -> the query and key of the call under way

  def interceptor(next_fun, call_args, call_kwargs, context):
    out = next_fun(*call_args, **call_kwargs)
    module = context.module
    if context.method_name != "__call__":
      return out
    if isinstance(module, nn.MultiHeadDotProductAttention):
      path = layouts.join_path(module.path)
      record = pending.pop(path, {})
      if {"query", "key"} <= set(record):  # (a wrapper's outer call: not)
        sink.measure(path, record["query"], record["key"],
                     call_kwargs.get("mask"), out, False,
                     _is_self_attention(call_args, call_kwargs))
    elif (isinstance(module.parent, nn.MultiHeadDotProductAttention)
          and module.name in _PROJECTIONS):
      pending.setdefault(layouts.join_path(module.parent.path), {})[
          _PROJECTIONS[module.name]] = out
    return out

  with jax.disable_jit(), nn.intercept_methods(interceptor):
    apply_fn(variables, *args, **kwargs)


class _Capture:
  """An nnx `attention_fn` that keeps the query, key and mask it is given."""

  def __init__(self, attention_fn: Callable, path: str, sink: _Sink):
    self.attention_fn, self.path, self.sink = attention_fn, path, sink
    self.last = {}

  def __call__(self, query, key, value, **kwargs):
    self.last = dict(query=query, key=key, mask=kwargs.get("mask"),
                     causal=bool(kwargs.get("is_causal", False)))
    return self.attention_fn(query, key, value, **kwargs)


@functools.cache
def _recording(cls: type) -> type:
  """A subclass of the nnx attention class `cls` that measures each call
  (its `attention_fn` a `_Capture`)."""

  def __call__(self, inputs_q, inputs_k=None, inputs_v=None, **kwargs):
    out = cls.__call__(self, inputs_q, inputs_k, inputs_v, **kwargs)
    capture = self.attention_fn
    record, capture.last = capture.last, {}
    if record:
      capture.sink.measure(capture.path, record["query"], record["key"],
                           record["mask"], out, record["causal"],
                           _is_self_attention((inputs_q, inputs_k), {}))
    return out

  return type(cls.__name__, (cls,), {"__call__": __call__})


def _run_nnx(apply_fn: Callable, module: nnx.Module, args, kwargs,
             sink: _Sink) -> dict[str, int | None]:
  """Runs `apply_fn(clone, *args, **kwargs)` on a clone of `module` whose
  `nnx.MultiHeadAttention`s measure themselves; their stack lengths."""
  clone = nnx.clone(module)
  stacks = {}
  for path, layer in nnx.iter_modules(clone):
    if isinstance(layer, nnx.MultiHeadAttention):
      name = layouts.join_path(path)
      layer.attention_fn = _Capture(layer.attention_fn, name, sink)
      object.__setattr__(layer, "__class__", _recording(type(layer)))
      kernel = layer.query.kernel
      stacks[name] = kernel.shape[0] if kernel.ndim == 4 else None
  if not stacks:
    raise ValueError("no nnx.MultiHeadAttention in the module" + _USE_WEIGHTS
                     + ".")
  apply_fn(clone, *args, **kwargs)
  if not sink.started:
    raise ValueError(
        f"apply_fn ran none of the module's attention layers "
        f"({', '.join(stacks)}): attention_table calls apply_fn(copy, "
        "*args) on a copy of the module, so apply_fn must run the module it "
        "is handed (lambda m, x: m(x)), not a model it closes over.")
  return stacks


def _linen_stacks(tree: Any, paths) -> dict[str, int | None]:
  """The stack length L of each linen attention layer at `paths` whose
  query kernel is [L, d, H, D] (scanned over layers), else None."""
  out = {}
  for path in paths:
    node = tree
    for part in path.split("/") if path else ():
      node = node.get(part, {}) if isinstance(node, Mapping) else {}
    query = node.get("query") if isinstance(node, Mapping) else None
    kernel = query.get("kernel") if isinstance(query, Mapping) else None
    out[path] = np.shape(kernel)[0] if np.ndim(kernel) == 4 else None
  return out


def _rows(path: str, measured: dict) -> list[dict]:
  return [dict(path=path, head=h, entropy=float(measured["entropy"][h]),
               rho=np.asarray(measured["rho"][h]).tolist(),
               rank_residual=float(measured["rank_residual"]))
          for h in range(len(measured["entropy"]))]


def attention_table(apply_fn: Callable, variables: Any, *args,
                    **kwargs) -> list[dict]:
  r"""Entropy, :math:`\rho_i` and rank collapse of every attention head.

  Runs `apply_fn(variables, *args, **kwargs)` once: linen, e.g.
  `model.apply`; nnx, `variables` is the Module and e.g. `lambda m, x:
  m(x)`. Returns one row per (path, head) (paths as `qk_matrices`, "path/l"
  for layer l of a scanned stack) with `attention_stats`' `entropy`, `rho`
  (a list) and the layer's `rank_residual`. ValueError, saying what to do,
  if no attention layer ran or one could not be measured.
  """
  state = nnx.state(variables) if isinstance(variables, nnx.Module) else (
      variables)
  if qk.is_traced((state, args, kwargs)):
    raise ValueError("attention_table runs the model and returns Python "
                     "numbers: call it outside jax.jit, grad or vmap.")
  sink = _Sink()
  if isinstance(variables, nnx.Module):
    stacks = _run_nnx(apply_fn, variables, args, kwargs, sink)
  else:
    _run_linen(apply_fn, variables, args, kwargs, sink)
    stacks = _linen_stacks(qk.param_tree(variables), sink.started)
  jax.effects_barrier()
  if not sink.started:
    raise ValueError("no attention layer ran: looked for calls of "
                     "flax.linen.MultiHeadDotProductAttention (or a "
                     "subclass) or nnx.MultiHeadAttention" + _USE_WEIGHTS
                     + ".")
  rows = []
  for path in sink.started:
    stack = stacks.get(path)
    sink.check(path, stack)
    calls = sink.calls[path]
    rows += (_rows(path, calls[-1]) if stack is None else
             [r for l, m in enumerate(calls)
              for r in _rows(layouts.join_path((path, l)), m)])
  return rows
