r"""Attention entropy, rho_i and rank collapse of any Flax attention model.

Shapes: B = batch, T = queries, S = keys, H = heads, D = head width,
d = width.

`attention_table` runs the model once, unmodified, recording each attention
layer's query, key, mask and output (linen: `nn.intercept_methods`; nnx: a
clone with a recording `attention_fn`), and recomputes the logits
:math:`\omega = q k^\top/\sqrt D` as Flax's `dot_product_attention` does.
Not seen: a custom `attention_fn`, a decoding cache, lifted transforms or a
jitted `apply_fn`; a layer called twice is measured on its last call.
"""
# pylint: disable=invalid-name
import functools
from typing import Any, Callable

import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp

from qkspec.for_flax import layouts
from qkspec.theory import diagnostics
from qkspec.theory import propagation
from qkspec.theory import softmax

# linen children of an attention layer whose outputs are its query and key
_PROJECTIONS = {"query": "query", "query_ln": "query", "key": "key",
                "key_ln": "key"}


@functools.partial(jax.jit, static_argnames="causal")
def attention_stats(query: jax.Array, key: jax.Array, mask: jax.Array | None,
                    output: jax.Array, causal: bool = False
                    ) -> dict[str, jax.Array]:
  r"""Per-head entropy and :math:`\rho_i`, and the output's rank collapse.

  Of query [..., T, H, D], key [..., S, H, D], mask None or [..., H, T, S]
  (broadcast; with `causal`, also j <= t) and output [..., T, d]: `entropy`
  [H] of :math:`\mathrm{softmax}(q_t^\top k_j/\sqrt D)` over the visible
  keys (mean over batch and queries), `rho` [H, S] (Definition 1 on the last
  query) and `rank_residual` [] (Dong's "mean" relative residual, batch
  mean), as `qkspec.training.layer_stats`.
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
  probs_BxHxTxS = jax.nn.softmax(jnp.where(
      visible_BxHxTxS, logits_BxHxTxS, jnp.finfo(jnp.float32).min), axis=-1)
  entropy_H = jax.vmap(diagnostics.attention_entropy, in_axes=(1, 1))(
      probs_BxHxTxS, visible_BxHxTxS)
  rho_HxS = jax.vmap(propagation.empirical_rho, in_axes=1)(
      logits_BxHxTxS[:, :, -1, :])
  out_BxTxd = output.reshape(-1, *output.shape[-2:]).astype(jnp.float32)
  residual = jnp.mean(diagnostics.relative_residual(out_BxTxd, "mean"))
  return dict(entropy=entropy_H, rho=rho_HxS, rank_residual=residual)


def _record_linen(apply_fn, variables, args, kwargs) -> dict[str, dict]:
  """Runs `apply_fn(variables, *args, **kwargs)`, recording every linen
  attention layer's query, key, mask and output by its path."""
  records = {}

  def interceptor(next_fun, call_args, call_kwargs, context):
    out = next_fun(*call_args, **call_kwargs)
    module = context.module
    if context.method_name != "__call__":
      return out
    if isinstance(module, nn.MultiHeadDotProductAttention):
      record = records.setdefault(layouts.join_path(module.path), {})
      record["output"] = out
      if "mask" in call_kwargs:    # SelfAttention passes it on by name
        record["mask"] = call_kwargs["mask"]
    elif (isinstance(module.parent, nn.MultiHeadDotProductAttention)
          and module.name in _PROJECTIONS):
      records.setdefault(layouts.join_path(module.parent.path), {})[
          _PROJECTIONS[module.name]] = out
    return out

  with nn.intercept_methods(interceptor):
    apply_fn(variables, *args, **kwargs)
  return records


def _recording(attention_fn: Callable, record: dict) -> Callable:
  """`attention_fn`, recording its query, key, mask and output."""
  def attention(query, key, value, **kwargs):
    heads = attention_fn(query, key, value, **kwargs)
    record.update(query=query, key=key, mask=kwargs.get("mask"),
                  causal=bool(kwargs.get("is_causal", False)), heads=heads)
    return heads
  return attention


def _record_nnx(apply_fn, module, args, kwargs) -> dict[str, dict]:
  """Runs `apply_fn(clone, *args, **kwargs)` on a clone of `module`,
  recording every `nnx.MultiHeadAttention`'s query, key, mask and output."""
  clone = nnx.clone(module)
  records, layers = {}, {}
  for path, layer in nnx.iter_modules(clone):
    if isinstance(layer, nnx.MultiHeadAttention):
      name = layouts.join_path(path)
      layer.attention_fn = _recording(layer.attention_fn,
                                      records.setdefault(name, {}))
      layers[name] = layer
  apply_fn(clone, *args, **kwargs)
  for name, record in records.items():
    if "heads" in record:
      record["output"] = layers[name].out(record.pop("heads"))
  return records


def attention_table(apply_fn: Callable, variables: Any, *args,
                    **kwargs) -> list[dict]:
  r"""Entropy, :math:`\rho_i` and rank collapse of every attention head.

  Runs `apply_fn(variables, *args, **kwargs)` once: linen, e.g.
  `model.apply`; nnx, `variables` is the Module and e.g. `lambda m, x:
  m(x)`. Returns one row per (path, head) (paths as `qk_matrices`) with
  `attention_stats`' `entropy`, `rho` (a list) and the layer's
  `rank_residual`; ValueError if no attention layer ran.
  """
  if isinstance(variables, nnx.Module):
    records = _record_nnx(apply_fn, variables, args, kwargs)
  else:
    records = _record_linen(apply_fn, variables, args, kwargs)
  records = {p: r for p, r in records.items()
             if {"query", "key", "output"} <= set(r)}
  if not records:
    raise ValueError("no attention layer ran: looked for calls of "
                     "flax.linen.MultiHeadDotProductAttention (or a "
                     "subclass) or nnx.MultiHeadAttention, outside lifted "
                     "transforms and jit.")
  rows = []
  for path, r in records.items():
    stats = jax.device_get(attention_stats(
        r["query"], r["key"], r.get("mask"), r["output"],
        causal=r.get("causal", False)))
    rows += [dict(path=path, head=h, entropy=float(stats["entropy"][h]),
                  rho=stats["rho"][h].tolist(),
                  rank_residual=float(stats["rank_residual"]))
             for h in range(len(stats["entropy"]))]
  return rows
