r"""W_QK, LocATER and the eigenspectrum of any Flax attention model.

Shapes: L = stacked layers, d = model width, H = heads, D = head width.

A Flax attention layer projects rows with a query kernel :math:`K_q`
[d, H, D], so per head

.. math:: W_{QK}^{(h)} = W_Q^\top W_K = K_q[:, h, :]\,K_k[:, h, :]^\top,
          \qquad q_t^\top k_j = x_t^\top W_{QK}^{(h)} x_j

(without the temperature and biases). Layers are found by their parameters
(`layouts.LOOKED_FOR`); `qk_spec` names the kernels of any other layout.
Heads are never guessed: kernels that merge them ([d, H*D]) need
`num_heads`. 16-bit parameters give float32 results.
"""
# pylint: disable=invalid-name
from typing import Any, Mapping, NamedTuple

from flax import nnx
from flax.core import meta
import jax
import jax.numpy as jnp

from qkspec.for_flax import layouts
from qkspec.theory import locater
from qkspec.theory import softmax
from qkspec.theory import spectrum


class QKLayer(NamedTuple):
  """One attention layer found in a parameter tree."""
  w_qk: jax.Array         # [H, d, d], float32 or wider
  head_dim: int           # D, whose square root scales its logits


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


def _float(x: jax.Array) -> jax.Array:
  """`x` in float32 if it is narrower (bf16, fp16), else as is."""
  return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def _from_kernels(kernels: layouts.Kernels) -> QKLayer:
  """W_QK [H, d, d] of query and key kernels [d, H, D]."""
  w_qk = spectrum.qk_from_kernels(_float(kernels.query), _float(kernels.key))
  return QKLayer(w_qk, kernels.query.shape[-1])


def _search(tree: Mapping, num_heads: layouts.NumHeads, nodes: set[str],
            prefix: tuple = ()) -> dict[str, QKLayer]:
  """The attention layers at and below `tree` (at `prefix`) by path; adds
  the paths of the nodes holding them to `nodes`."""
  path = layouts.join_path(prefix)
  w_qk = layouts.joint(tree, path, num_heads)
  if w_qk is not None:
    nodes.add(path)
    # qkspec's models scale the joint W_QK's logits by sqrt(d / H)
    H, d = w_qk.shape[:2]
    return {path: QKLayer(_float(w_qk), max(d // H, 1))}
  kernels = layouts.match(tree, path, num_heads)
  if kernels is not None:
    nodes.add(path)
    return {p: _from_kernels(k) for p, k in kernels.items()}
  found = {}
  for name, node in tree.items():
    if isinstance(node, Mapping):
      found.update(_search(node, num_heads, nodes, prefix + (name,)))
  return found


def _check_named(num_heads: layouts.NumHeads, names: set[str]) -> None:
  """ValueError if a `num_heads` mapping names no layer."""
  if isinstance(num_heads, Mapping):
    unknown = sorted(set(map(str, num_heads)) - names)
    if unknown:
      raise ValueError(f"num_heads names {unknown}, which are no attention "
                       f"layers; the layers are {sorted(names)}.")


def attention_layers(params_or_module: Any, qk_spec: layouts.QKSpec | None
                     = None, *, num_heads: layouts.NumHeads = None
                     ) -> dict[str, QKLayer]:
  """Every attention layer of `params_or_module` by its "/"-joined path
  (layer l of a stack: "path/l").

  Found by parameter structure (`layouts`), or exactly the layers `qk_spec`
  names: {name: (query kernel, key kernel)}, each a path or a function of
  the parameter tree returning [d, H*D], [d, H, D], [L, d, d] or
  [L, d, H, D]. `num_heads`: an int, or {layer path or qk_spec name: int}
  (a stack's path without its index). ValueError (listing the parameter
  paths seen) when nothing is found, a path names nothing, or a kernel does
  not say its heads and `num_heads` does not either.
  """
  tree = param_tree(params_or_module)
  if qk_spec is not None:
    _check_named(num_heads, set(map(str, qk_spec)))
    return {p: _from_kernels(k) for p, k in layouts.from_spec(
        tree, qk_spec, num_heads).items()}
  nodes = set()
  found = _search(tree, num_heads, nodes)   # "" if the model is one layer
  if not found:
    raise ValueError(f"no attention layer found: looked for "
                     f"{layouts.LOOKED_FOR}. Pass qk_spec={{name: (query "
                     "kernel path, key kernel path)} for another layout.\n"
                     + layouts.seen(tree))
  _check_named(num_heads, nodes)
  return found


def qk_matrices(params_or_module: Any, qk_spec: layouts.QKSpec | None = None,
                *, num_heads: layouts.NumHeads = None) -> dict[str, jax.Array]:
  r""":math:`W_{QK} = W_Q^\top W_K` [H, d, d] of every attention layer,
  unscaled (as LocATER and Fig. 6B use it), by path (e.g. "Block_0/attn");
  float32 for 16-bit parameters; differentiable with respect to the
  parameters. `qk_spec`, `num_heads`: as `attention_layers`."""
  return {path: a.w_qk for path, a in attention_layers(
      params_or_module, qk_spec, num_heads=num_heads).items()}


def locater_penalty(params_or_module: Any, hparams: locater.LocaterHParams,
                    qk_spec: layouts.QKSpec | None = None, *,
                    num_heads: layouts.NumHeads = None) -> jax.Array:
  r"""The LocATER penalty (Sec. 6) summed over layers and heads, a scalar.

  .. math:: P = \sum_{\ell, h} \kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK})
            + \kappa_2\,(\mathrm{tr}\,W_{QK} - \tau)^2

  with :math:`(\kappa_1, \kappa_2, \tau)` = `hparams`. Add it to the mean
  loss, as the paper prints :math:`J + P`; fairseq's reading adds
  :math:`P/N` for N targets per batch. Differentiable (`jax.grad`,
  `nnx.grad`); float32 for 16-bit parameters.
  """
  return sum(jnp.sum(locater.locater_penalty(
      w_qk, hparams.kappa1, hparams.kappa2, hparams.target))
             for w_qk in qk_matrices(params_or_module, qk_spec,
                                     num_heads=num_heads).values())


SPECTRUM_COLUMNS = ("scale", "trace", "xi", "eta", "r")
_spectrum_stats = jax.jit(spectrum.spectrum_stats,
                          static_argnames="temperature")


def spectrum_table(params_or_module: Any,
                   qk_spec: layouts.QKSpec | None = None, *,
                   num_heads: layouts.NumHeads = None) -> list[dict]:
  r"""Eigenspectrum statistics of every layer and head (Eqs. 5-8).

  One row per (path, head): `scale`, `trace`, `xi`, `eta` and `r` of
  `spectrum.spectrum_stats` (:math:`\Sigma = I`) at :math:`\lambda =
  \sqrt D`, D the head width, as Flax's `dot_product_attention` and
  Hugging Face's models scale the logits. Python floats: call it outside
  `jax.jit`.
  """
  if is_traced(param_tree(params_or_module)):
    raise ValueError("spectrum_table returns Python floats and cannot run "
                     "under jax.jit, grad or vmap: call it outside them "
                     "(qk_matrices and locater_penalty can be traced).")
  rows = []
  for path, a in attention_layers(params_or_module, qk_spec,
                                  num_heads=num_heads).items():
    lam = float(softmax.temperature(None, a.head_dim))
    # with Sigma = I, spectrum_stats' trace tr(sym(W_QK)) is tr W_QK
    stats = jax.device_get(_spectrum_stats(a.w_qk, temperature=lam))
    rows += [dict(path=path, head=h, **{c: float(stats[c][h])
                                        for c in SPECTRUM_COLUMNS})
             for h in range(a.w_qk.shape[0])]
  return rows
