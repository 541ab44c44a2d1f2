r"""Attention entropy, rho_i and rank collapse of any Flax attention model.

Shapes: B = batch, T = queries, S = keys, N = heads, d = width,
L = stacked layers.

`attention_table` runs the model once, unmodified, and measures each
attention layer from the probabilities it computes, its mask and its
output (linen: `nn.intercept_methods`; nnx: a clone whose attention layers
record themselves). The probabilities are those the layer's `attention_fn`
sows: it is called with flax's `module` argument set to a recorder, and
flax's `dot_product_attention` (and `dot_product_attention_weights`, which
a custom function such as one that applies rotary positions may call)
sows them there, as `sow_weights=True` would. So grouped-query attention,
RoPE, soft-capping or QK-norm inside the layer are measured as the layer
computed them. An `attention_fn` that takes no `module`, or sows nothing,
is an error that points to `attention_table_from_weights`.

A linen run is op by op (`jax.disable_jit`), so a jitted `apply_fn` runs as
if unjitted and its compiled cache is left alone. An nnx clone is traced
by `nnx.jit` once per shape: its recording layers are equal from call to
call, and where a layer runs traced (`nn.remat`, `nnx.jit`, `nnx.scan`) it
sends its measurements out with `jax.debug.callback`, to whichever
`attention_table` call is running. A stack scanned over layers (`nn.scan`,
`nnx.scan`) gives one set of rows per layer, "path/l".

Assumed, not checked: the mask passed to the layer (with `is_causal`) says
which keys each query sees; a key the `attention_fn` hides by itself (a
window it builds) counts as visible, with probability 0. Not covered:
attention other than linen's `MultiHeadDotProductAttention` and nnx's
`MultiHeadAttention` (Hugging Face's, gemma's, MaxText's: use
`attention_table_from_weights`), a model vmapped over the batch, one layer
looped over (no stack), `eval_shape`, decoding caches. A layer called
twice, not stacked, is measured on its last call.
"""
# pylint: disable=invalid-name
import functools
import inspect
import itertools
import sys
from typing import Any, Callable, Mapping

import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.for_flax import layouts
from qkspec.for_flax import qk
from qkspec.for_flax import stats

_USE_WEIGHTS = ("; for attention it cannot see (Hugging Face's, gemma's, "
                "MaxText's), pass the model's attention probabilities to "
                "attention_table_from_weights")
_SINKS = []         # the attention_table calls under way, innermost last
_TOKENS = itertools.count()   # one per call measured, eager or traced


@functools.partial(jax.jit, static_argnames=("causal", "self_attention"))
def attention_stats(probs: jax.Array, mask: jax.Array | None,
                    output: jax.Array, causal: bool = False,
                    self_attention: bool = True) -> dict[str, jax.Array]:
  r"""Per-head entropy and :math:`\rho_i`, and the output's rank collapse.

  Of the probabilities [..., N, T, S] a layer computed, its mask None or
  [..., N, T, S] (broadcast; with `causal`, also j <= t) and its output
  [..., T, d]: `entropy` [N] and `rho` [N, S] (`stats.probability_stats`)
  and `rank_residual` [] (Dong's "mean" relative residual of the token
  rows, batch mean). Padded queries (`stats.query_tokens`) count in none of
  them.
  """
  T, S = probs.shape[-2:]
  probs_BxNxTxS = probs.reshape(-1, *probs.shape[-3:])
  visible = jnp.broadcast_to(True if mask is None else mask.astype(bool),
                             probs.shape)
  if causal:
    visible = visible & jnp.broadcast_to(jnp.tril(jnp.ones((T, S), bool)),
                                         visible.shape)
  visible_BxNxTxS = visible.reshape(probs_BxNxTxS.shape)
  ok_BxNxT = stats.query_tokens(visible_BxNxTxS, self_attention)
  out_BxTxd = output.reshape(-1, *output.shape[-2:])
  return dict(**stats.probability_stats(probs_BxNxTxS, visible_BxNxTxS,
                                        ok_BxNxT),
              rank_residual=stats.rank_residual(out_BxTxd,
                                                jnp.any(ok_BxNxT, axis=1)))


def _in_scan_shape_pass() -> bool:
  """Whether this runs in the trace linen's `nn.scan` makes of its body
  only to check which variables it broadcasts (`flax.core.axes_scan`,
  `init_mode=True`): that computation never runs, and a callback in it
  would fail flax's check (flax >= 0.12.10 keeps it in the trace)."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None:
    if (frame.f_code.co_name == "body_fn" and frame.f_locals.get("init_mode")
        and frame.f_globals.get("__name__") == "flax.core.axes_scan"):
      return True
    frame = frame.f_back
  return False


def _deliver(path: str, token: int, measured: dict) -> None:
  """A traced layer's measurements, to the attention_table call running."""
  if _SINKS:
    _SINKS[-1].put(path, token, measured)


class _Sink:
  """The measurements of each attention layer, by path, call by call."""

  def __init__(self):
    self.calls: dict[str, list[dict]] = {}   # measurements received
    self.tokens: dict[str, set[int]] = {}    # calls (or traces) seen
    self.failed: dict[str, str] = {}         # why a callback was refused

  def put(self, path: str, token: int, measured: dict) -> None:
    self.tokens.setdefault(path, set()).add(token)
    self.calls.setdefault(path, []).append(jax.device_get(measured))

  def measure(self, path: str, probs, mask, output, causal: bool,
              self_attention: bool) -> None:
    """Measures one call of the layer at `path`, now if its values are
    concrete, else each time the traced computation runs."""
    if _in_scan_shape_pass():
      return
    token = next(_TOKENS)
    self.tokens.setdefault(path, set()).add(token)
    with jax.disable_jit(False):
      measured = attention_stats(probs, mask, output, causal=causal,
                                 self_attention=self_attention)
    if not qk.is_traced(measured):
      self.put(path, token, measured)
      return
    try:
      jax.debug.callback(functools.partial(_deliver, path, token), measured,
                         ordered=True)
    except Exception as e:  # pylint: disable=broad-except
      self.failed[path] = f"{type(e).__name__}: {str(e).splitlines()[0]}"

  def check(self, path: str, stack: int | None) -> None:
    """ValueError unless the layer at `path` sent one measurement per call
    (or run of a trace), or one per layer of its `stack`."""
    n, started = len(self.calls.get(path, ())), len(self.tokens[path])
    if (n == started) if stack is None else (n == stack):
      return
    why = f" ({self.failed[path]})" if path in self.failed else ""
    raise ValueError(
        f"attention layer {path!r} sent {n} measurements for {started} "
        f"calls{why}: it ran under a transformation attention_table "
        "cannot follow (jax.vmap, a loop over one layer, eval_shape); pass "
        "apply_fn without it" + _USE_WEIGHTS + ".")


class _Probabilities:
  """Stands in for flax's `module` argument of an attention function and
  keeps what it sows as "attention_weights"."""

  def __init__(self):
    self.value = None

  def sow(self, collection, name, value, *args, **kwargs):
    del collection, args, kwargs
    if name == "attention_weights":
      self.value = value
    return True


def _takes_module(fn: Callable) -> bool:
  try:
    params = inspect.signature(fn).parameters.values()
  except (TypeError, ValueError):
    return False
  return any(p.name == "module" or p.kind == p.VAR_KEYWORD for p in params)


def _with_probabilities(fn: Callable, path: str, args, kwargs
                        ) -> tuple[Any, Any]:
  """`fn(*args, **kwargs)` and the probabilities it sows into `module`."""
  name = getattr(fn, "__name__", type(fn).__name__)
  if not _takes_module(fn):
    raise ValueError(
        f"attention layer {path!r}: its attention_fn {name} takes no "
        "`module`, so attention_table cannot see the probabilities it "
        "computes; let it take `module` and sow them there (flax's "
        "dot_product_attention and dot_product_attention_weights do)"
        + _USE_WEIGHTS + ".")
  recorder = _Probabilities()
  out = fn(*args, **{**kwargs, "module": recorder})
  if recorder.value is None:
    raise ValueError(
        f"attention layer {path!r}: its attention_fn {name} sowed no "
        "attention_weights into `module`, so attention_table cannot see the "
        "probabilities it computes; pass `module` on to flax's "
        "dot_product_attention or sow them" + _USE_WEIGHTS + ".")
  query, key = args[:2]
  batch, (T, N), S = query.shape[:-3], query.shape[-3:-1], key.shape[-3]
  probs = recorder.value
  # [..., N, T, S], or grouped [..., K, N/K, T, S] (query head k N/K + g)
  if probs.shape[-2:] != (T, S) or probs.shape[:len(batch)] != batch or (
      int(np.prod(probs.shape[len(batch):-2])) != N):
    raise ValueError(
        f"attention layer {path!r}: its attention_fn {name} sowed "
        f"attention_weights of shape {probs.shape}, not [..., N, T, S] = "
        f"{(*batch, N, T, S)}" + _USE_WEIGHTS + ".")
  return out, probs.reshape(*batch, N, T, S)


def _is_self_attention(call_args: tuple, call_kwargs: dict) -> bool:
  inputs_q = call_args[0] if call_args else call_kwargs.get("inputs_q")
  inputs_k = (call_args[1] if len(call_args) > 1
              else call_kwargs.get("inputs_k", call_kwargs.get("inputs_kv")))
  return inputs_k is None or inputs_k is inputs_q


def _linen_recorder(fn: Callable, path: str, record: dict) -> Callable:
  """`fn` for one call of a linen layer: keeps its probabilities and mask
  in `record`; flax passes it the arguments `fn`'s signature names."""

  def attention_fn(*args, **kwargs):
    out, record["probs"] = _with_probabilities(fn, path, args, kwargs)
    record["mask"] = kwargs.get("mask")
    return out

  attention_fn.__signature__ = inspect.signature(fn)
  attention_fn.qkspec_recording = True
  return attention_fn


def _run_linen(apply_fn: Callable, variables: Any, args, kwargs,
               sink: _Sink) -> None:
  """Runs `apply_fn(variables, *args, **kwargs)`, measuring every call of a
  linen `MultiHeadDotProductAttention` (or subclass)."""

  def interceptor(next_fun, call_args, call_kwargs, context):
    module = context.module
    if (context.method_name != "__call__"
        or not isinstance(module, nn.MultiHeadDotProductAttention)
        or getattr(module.attention_fn, "qkspec_recording", False)):
      return next_fun(*call_args, **call_kwargs)   # (a wrapper's inner call)
    path, record, fn = layouts.join_path(module.path), {}, module.attention_fn
    object.__setattr__(module, "attention_fn",
                       _linen_recorder(fn, path, record))
    try:
      out = next_fun(*call_args, **call_kwargs)
    finally:
      object.__setattr__(module, "attention_fn", fn)
    if "probs" in record:
      sink.measure(path, record["probs"], record["mask"], out, False,
                   _is_self_attention(call_args, call_kwargs))
    return out

  with jax.disable_jit(), nn.intercept_methods(interceptor):
    apply_fn(variables, *args, **kwargs)


class _Capture:
  """An nnx `attention_fn` that keeps the probabilities, mask and causal
  flag of its last call; equal for equal (function, path), so that a
  jitted apply finds its clone's trace again."""

  def __init__(self, attention_fn: Callable, path: str):
    self.attention_fn, self.path = attention_fn, path
    self.last = {}

  def __eq__(self, other):
    return isinstance(other, _Capture) and (
        (self.attention_fn, self.path) == (other.attention_fn, other.path))

  def __hash__(self):
    return hash((self.attention_fn, self.path))

  def __call__(self, query, key, value, **kwargs):
    mask = kwargs.get("mask")
    if mask is not None and kwargs.get("is_causal"):
      # flax's dot_product_attention_weights cannot broadcast its causal
      # mask to a [B, 1, 1, S] one: combine them here, as it would
      T, S = query.shape[-3], key.shape[-3]
      shape = jnp.broadcast_shapes(mask.shape, (T, S))
      kwargs.update(is_causal=False, mask=jnp.broadcast_to(mask, shape) & (
          jnp.broadcast_to(jnp.tril(jnp.ones((T, S), bool)), shape)))
    out, probs = _with_probabilities(self.attention_fn, self.path,
                                     (query, key, value), kwargs)
    self.last = dict(probs=probs, mask=kwargs.get("mask"),
                     causal=bool(kwargs.get("is_causal", False)))
    return out


@functools.cache
def _recording(cls: type) -> type:
  """A subclass of the nnx attention class `cls` that measures each call
  (its `attention_fn` a `_Capture`)."""

  def __call__(self, inputs_q, inputs_k=None, inputs_v=None, **kwargs):
    out = cls.__call__(self, inputs_q, inputs_k, inputs_v, **kwargs)
    capture = self.attention_fn
    record, capture.last = capture.last, {}
    if record:
      _SINKS[-1].measure(capture.path, record["probs"], record["mask"], out,
                         record["causal"],
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
      layer.attention_fn = _Capture(layer.attention_fn, name)
      object.__setattr__(layer, "__class__", _recording(type(layer)))
      kernel = layer.query.kernel
      stacks[name] = kernel.shape[0] if kernel.ndim == 4 else None
  if not stacks:
    raise ValueError("no nnx.MultiHeadAttention in the module" + _USE_WEIGHTS
                     + ".")
  apply_fn(clone, *args, **kwargs)
  jax.effects_barrier()
  if not sink.tokens:
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
  m(x)` (jitted or not; `nnx.jit` compiles it once per shape). Returns one
  row per (path, query head) (paths as `qk_matrices`, "path/l" for layer l
  of a scanned stack) with `attention_stats`' `entropy`, `rho` (a list)
  and the layer's `rank_residual`, from the probabilities the layer
  computed. ValueError, saying what to do, if no attention layer ran or
  one could not be measured.
  """
  state = nnx.state(variables) if isinstance(variables, nnx.Module) else (
      variables)
  if qk.is_traced((state, args, kwargs)):
    raise ValueError("attention_table runs the model and returns Python "
                     "numbers: call it outside jax.jit, grad or vmap.")
  sink = _Sink()
  _SINKS.append(sink)
  try:
    if isinstance(variables, nnx.Module):
      stacks = _run_nnx(apply_fn, variables, args, kwargs, sink)
    else:
      _run_linen(apply_fn, variables, args, kwargs, sink)
      stacks = _linen_stacks(qk.param_tree(variables), sink.tokens)
    jax.effects_barrier()
  finally:
    _SINKS.remove(sink)
  if not sink.tokens:
    raise ValueError("no attention layer ran: looked for calls of "
                     "flax.linen.MultiHeadDotProductAttention (or a "
                     "subclass) or nnx.MultiHeadAttention" + _USE_WEIGHTS
                     + ".")
  rows = []
  for path in sink.tokens:
    stack = stacks.get(path)
    sink.check(path, stack)
    calls = sink.calls[path]
    rows += (_rows(path, calls[-1]) if stack is None else
             [r for l, m in enumerate(calls)
              for r in _rows(layouts.join_path((path, l)), m)])
  return rows
