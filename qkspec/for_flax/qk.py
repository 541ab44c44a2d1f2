r"""W_QK, LocATER and the eigenspectrum of any Flax attention model.

Shapes: L = stacked layers, d = model width, N = query heads, K = key heads,
D = head width.

A Flax attention layer projects rows with a query kernel :math:`K_q`
[d, N, D] and a key kernel :math:`K_k` [d, K, D], so per query head h

.. math:: W_{QK}^{(h)} = W_Q^\top W_K
          = K_q[:, h, :]\,K_k[:, h // (N/K), :]^\top,
          \qquad q_t^\top k_j = x_t^\top W_{QK}^{(h)} x_j

(without the temperature and biases; K = N without grouped-query
attention), QK-norm gains folded into the kernels (`qk_norm`). Layers are
found by their parameters (`layouts.LOOKED_FOR`); `qk_spec` names the
kernels of any other layout. Heads are never guessed: kernels that merge
them ([d, N*D]) need `num_heads`. 16-bit parameters give float32 results.
The penalty and the spectrum come from per-head [D, D] products of the
kernels (`spectrum.kernel_spectrum_stats`), never from a d x d matrix;
`qk_matrices` builds the matrices themselves.
"""
# pylint: disable=invalid-name
from typing import Any, Mapping, NamedTuple

from flax import nnx
from flax.core import meta
import jax
import jax.numpy as jnp

from qkspec.for_flax import layouts
from qkspec.for_flax import llm_layouts
from qkspec.for_flax import qk_norm as qk_norm_lib
from qkspec.theory import locater
from qkspec.theory import softmax
from qkspec.theory import spectrum

Temperature = float | Mapping[str, float] | None


class QKLayer(NamedTuple):
  """One attention layer found in a parameter tree."""
  kernels: layouts.Kernels   # as stored: 16-bit allowed, norms not folded
  head_dim: int              # D, whose square root scales its logits
  node: str                  # the node (or qk_spec name) it was found at


class _Reading(NamedTuple):
  """How `attention_layers` reads every node."""
  num_heads: layouts.NumHeads
  qk_norm: qk_norm_lib.QKNorm
  classes: Mapping[str, str]     # nnx norm classes, `qk_norm.module_forms`


def param_tree(params_or_module: Any) -> Mapping:
  """The parameters of linen variables or params, an nnx Module or an nnx
  State, as a nested mapping (partitioning metadata unboxed)."""
  x = params_or_module
  if isinstance(x, nnx.Module):
    x = nnx.state(x, nnx.Param)
  if isinstance(x, nnx.State):
    return nnx.to_pure_dict(x)
  if not isinstance(x, Mapping):
    raise TypeError("expected linen params or variables (a mapping), an nnx "
                    f"Module or an nnx State, got {type(x).__name__}.")
  params = x.get("params")
  return meta.unbox(params if isinstance(params, Mapping) else x)


def is_traced(tree: Any) -> bool:
  """Whether any leaf of `tree` is a tracer (inside jit, grad or vmap)."""
  return any(isinstance(leaf, jax.core.Tracer)
             for leaf in jax.tree.leaves(tree))


def folded(layer: QKLayer) -> tuple[jax.Array, jax.Array]:
  """The layer's query [d, N, D] and key [d, K, D] kernels as its logits
  use them: QK-norm gains folded in (`qk_norm.fold`), float32 or wider."""
  k = layer.kernels
  return (qk_norm_lib.fold(k.query, k.query_norm),
          qk_norm_lib.fold(k.key, k.key_norm))


def _joint(w_qk: jax.Array, path: str) -> QKLayer:
  """qkspec's joint W_QK [H, d, d] as kernels: :math:`W_h = W_h I^\top`,
  query [d, H, d] and one identity key head [d, 1, d]; its models scale
  the logits by sqrt(d / H)."""
  H, d = w_qk.shape[:2]
  kernels = layouts.Kernels(jnp.swapaxes(w_qk, 0, 1),
                            jnp.eye(d, dtype=w_qk.dtype)[:, None, :])
  return QKLayer(kernels, max(d // H, 1), path)


def _match(node: Mapping, path: str, reading: _Reading
           ) -> dict[str, layouts.Kernels] | None:
  """The layers whose kernels `node` (at `path`) holds, norms found."""
  heads = layouts.heads_of(reading.num_heads, path)
  found = (layouts.projections(node, path, heads)
           or llm_layouts.projections(node, path, heads))
  if found is None:
    return None
  return layouts.per_layer(path, found, qk_norm_lib.find(
      node, path, reading.qk_norm, reading.classes))


def _search(tree: Mapping, reading: _Reading, nodes: set[str],
            prefix: tuple = ()) -> dict[str, QKLayer]:
  """The attention layers at and below `tree` (at `prefix`) by path; adds
  the paths of the nodes holding them to `nodes`."""
  path = layouts.join_path(prefix)
  w_qk = layouts.joint(tree, path, reading.num_heads)
  if w_qk is not None:
    nodes.add(path)
    return {path: _joint(w_qk, path)}
  kernels = _match(tree, path, reading)
  if kernels is not None:
    nodes.add(path)
    return {p: QKLayer(k, k.query.shape[-1], path)
            for p, k in kernels.items()}
  found = {}
  for name, node in tree.items():
    if isinstance(node, Mapping):
      found.update(_search(node, reading, nodes, prefix + (name,)))
  return found


def _check_named(what: str, given: Any, names: set[str]) -> None:
  """ValueError if a mapping `given` (`what`) names no layer."""
  if isinstance(given, Mapping):
    unknown = sorted(set(map(str, given)) - names)
    if unknown:
      raise ValueError(f"{what} names {unknown}, which are no attention "
                       f"layers; the layers are {sorted(names)}.")


def attention_layers(params_or_module: Any, qk_spec: layouts.QKSpec | None
                     = None, *, num_heads: layouts.NumHeads = None,
                     qk_norm: qk_norm_lib.QKNorm = None
                     ) -> dict[str, QKLayer]:
  """Every attention layer of `params_or_module` by its "/"-joined path
  (layer l of a stack: "path/l").

  Found by parameter structure (`layouts`, `llm_layouts`), their QK-norms
  beside them (`qk_norm`), or exactly the layers `qk_spec` names: {name:
  (query kernel, key kernel)}, each a path or a function of the parameter
  tree returning [d, N*D], [d, N, D] (key [d, K, D]), [L, d, d] or
  [L, d, N, D], taken as the logits use them (any QK-norm folded in).
  `num_heads`: an int N, a pair (N, K), or {layer path or qk_spec name:
  either} (a stack's path without its index). `qk_norm`: how the norms
  apply their gains, a form or {layer path: form} (`qk_norm.FORMS`), where
  their names do not say. ValueError (listing the parameter paths seen)
  when nothing is found, a path names nothing, a kernel does not say its
  heads and `num_heads` does not either, or a norm's form is unknown.
  """
  tree = param_tree(params_or_module)
  qk_norm_lib.check_forms(qk_norm)
  if qk_spec is not None:
    if qk_norm is not None:
      raise ValueError("qk_norm reads the norms beside the layers found "
                       "without qk_spec; with qk_spec, fold the norms' gains "
                       "into the kernels its functions return.")
    _check_named("num_heads", num_heads, set(map(str, qk_spec)))
    return {p: QKLayer(k, k.query.shape[-1], str(name))
            for name in qk_spec
            for p, k in layouts.from_spec(tree, {name: qk_spec[name]},
                                          num_heads).items()}
  nodes = set()
  reading = _Reading(num_heads, qk_norm,
                     qk_norm_lib.module_forms(params_or_module))
  found = _search(tree, reading, nodes)   # "" if the model is one layer
  if not found:
    raise ValueError(f"no attention layer found: looked for "
                     f"{layouts.LOOKED_FOR}. Pass qk_spec={{name: (query "
                     "kernel path, key kernel path)} for another layout.\n"
                     + layouts.seen(tree))
  _check_named("num_heads", num_heads, nodes)
  _check_named("qk_norm", qk_norm, nodes)
  return found


def qk_matrices(params_or_module: Any, qk_spec: layouts.QKSpec | None = None,
                *, num_heads: layouts.NumHeads = None,
                qk_norm: qk_norm_lib.QKNorm = None) -> dict[str, jax.Array]:
  r""":math:`W_{QK} = W_Q^\top W_K` [N, d, d] of every attention layer,
  unscaled (as LocATER and Fig. 6B use it), by path (e.g. "Block_0/attn");
  query head h reads key head h // (N/K); QK-norm gains folded in; float32
  for 16-bit parameters; differentiable with respect to the parameters.
  `qk_spec`, `num_heads`, `qk_norm`: as `attention_layers`.

  It builds what it returns, N d^2 numbers a layer: 2 GiB of float32 for
  one layer of Llama-3-8B's size (d = 4096, N = 32). `locater_penalty` and
  `spectrum_table` need none of it.
  """
  return {path: spectrum.qk_from_kernels(*folded(a))
          for path, a in attention_layers(params_or_module, qk_spec,
                                          num_heads=num_heads,
                                          qk_norm=qk_norm).items()}


def locater_penalty(params_or_module: Any, hparams: locater.LocaterHParams,
                    qk_spec: layouts.QKSpec | None = None, *,
                    num_heads: layouts.NumHeads = None,
                    qk_norm: qk_norm_lib.QKNorm = None) -> jax.Array:
  r"""The LocATER penalty (Sec. 6) summed over layers and query heads, a
  scalar.

  .. math:: P = \sum_{\ell, h} \kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK})
            + \kappa_2\,(\mathrm{tr}\,W_{QK} - \tau)^2

  with :math:`(\kappa_1, \kappa_2, \tau)` = `hparams`, :math:`W_{QK}` as
  `qk_matrices` but never built: the scale and trace come from [D, D]
  products of the kernels (`locater.kernel_locater_penalty`), with the
  same value and gradient. Add it to the mean loss, as the paper prints
  :math:`J + P`; fairseq's reading adds :math:`P/N` for N targets per
  batch. Differentiable (`jax.grad`, `nnx.grad`); float32 for 16-bit
  parameters.
  """
  return sum(jnp.sum(locater.kernel_locater_penalty(
      *folded(a), hparams.kappa1, hparams.kappa2, hparams.target))
             for a in attention_layers(params_or_module, qk_spec,
                                       num_heads=num_heads,
                                       qk_norm=qk_norm).values())


SPECTRUM_COLUMNS = ("scale", "trace", "xi", "eta", "r")
_spectrum_stats = jax.jit(spectrum.kernel_spectrum_stats)


def _temperature(temperature: Temperature, a: QKLayer, path: str) -> float:
  r"""The logit scale :math:`\lambda` of the layer at `path`."""
  t = temperature
  if isinstance(t, Mapping):
    t = t.get(path, t.get(a.node))
  return float(softmax.temperature(t, a.head_dim))


def spectrum_table(params_or_module: Any,
                   qk_spec: layouts.QKSpec | None = None, *,
                   num_heads: layouts.NumHeads = None,
                   qk_norm: qk_norm_lib.QKNorm = None,
                   temperature: Temperature = None) -> list[dict]:
  r"""Eigenspectrum statistics of every layer and query head (Eqs. 5-8).

  One row per (path, head): `scale`, `trace`, `xi`, `eta` and `r` of
  `spectrum.spectrum_stats` (:math:`\Sigma = I`) at the logit scale
  :math:`\lambda` = `temperature`: a float, or {layer path: float} (a
  stack's path covers its layers), None (or a layer left out) meaning
  :math:`\sqrt D`, D the head width, as Flax's `dot_product_attention` and
  Hugging Face's models scale the logits. Others divide by another:
  MaxText's Llama-style models by 1 (1/sqrt(D) is folded into the query's
  initialisation), gemma and MaxText models that set a
  `query_pre_attn_scalar` s by 1/s (Gemma 2 27B: s = (d/N)^-1/2); gemma 4
  does not scale its logits (1). Computed from [D, D] products of the
  kernels (`spectrum.kernel_spectrum_stats`), one jitted call per layer.
  Python floats: call it outside `jax.jit`. `qk_spec`, `num_heads`,
  `qk_norm`: as `attention_layers`.
  """
  if is_traced(param_tree(params_or_module)):
    raise ValueError("spectrum_table returns Python floats and cannot run "
                     "under jax.jit, grad or vmap: call it outside them "
                     "(qk_matrices and locater_penalty can be traced).")
  layers = attention_layers(params_or_module, qk_spec, num_heads=num_heads,
                            qk_norm=qk_norm)
  _check_named("temperature", temperature,
               set(layers) | {a.node for a in layers.values()})
  rows = []
  for path, a in layers.items():
    # with Sigma = I, spectrum_stats' trace tr(sym(W_QK)) is tr W_QK
    stats = jax.device_get(_spectrum_stats(*folded(a), _temperature(
        temperature, a, path)))
    rows += [dict(path=path, head=h, **{c: float(stats[c][h])
                                        for c in SPECTRUM_COLUMNS})
             for h in range(len(stats["scale"]))]
  return rows
