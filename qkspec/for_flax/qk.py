r"""W_QK, LocATER and the eigenspectrum of any Flax attention model.

Shapes: d = model width, H = heads, D = head width.

A Flax attention layer projects rows with a query kernel :math:`K_q`
[d, H, D] ([d, D] for one head), so per head

.. math:: W_{QK}^{(h)} = W_Q^\top W_K = K_q[:, h, :]\,K_k[:, h, :]^\top,
          \qquad q_t^\top k_j = x_t^\top W_{QK}^{(h)} x_j

(without the temperature and biases). Layers are found by their parameters
(`LOOKED_FOR`); `qk_spec` names the kernels of any other layout.
"""
# pylint: disable=invalid-name
from typing import Any, Callable, Iterator, Mapping, NamedTuple

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from qkspec.theory import locater
from qkspec.theory import softmax
from qkspec.theory import spectrum

# A kernel in `qk_spec`: its path ("a/b/kernel") or a function of the
# parameter tree returning it (e.g. a slice of a fused QKV kernel).
KernelRef = str | Callable[[Any], jax.Array]
QKSpec = Mapping[str, tuple[KernelRef, KernelRef]]

LOOKED_FOR = (
    "a node with `query/kernel` and `key/kernel` of one shape, [d, H, D] or "
    "[d, D] (flax.linen.MultiHeadDotProductAttention / SelfAttention, "
    "nnx.MultiHeadAttention, qkspec's SelfAttention), or a `w_qk` "
    "[H, d, d] (qkspec's joint W_QK)")
_MAX_LISTED = 40          # parameter paths an error message lists


class QKLayer(NamedTuple):
  """One attention layer found in a parameter tree."""
  w_qk: jax.Array         # [H, d, d]
  head_dim: int           # D, whose square root scales its logits


def param_tree(params_or_module: Any) -> Mapping:
  """The parameters of linen variables or params, an nnx Module or an nnx
  State, as a nested mapping."""
  x = params_or_module
  if isinstance(x, nnx.Module):
    x = nnx.state(x, nnx.Param)
  if isinstance(x, nnx.State):
    return nnx.to_pure_dict(x)
  if not isinstance(x, Mapping):
    raise TypeError("expected linen params or variables (a mapping), an nnx "
                    f"Module or an nnx State, got {type(x).__name__}.")
  params = x.get("params")
  return params if isinstance(params, Mapping) else x


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


def _seen(tree: Mapping) -> str:
  """The parameter paths of `tree` with their shapes, for error messages."""
  rows = [f"{p} {tuple(jnp.shape(v))}" for p, v in _leaves(tree)]
  more = len(rows) - _MAX_LISTED
  rows = rows[:_MAX_LISTED] + ([f"... and {more} more"] if more > 0 else [])
  return "\n  ".join(["parameter paths seen:"] + (rows or ["(none)"]))


def _from_kernels(wq_kernel, wk_kernel) -> QKLayer:
  """W_QK [H, d, d] from Flax kernels [d, H, D] (or [d, D]: one head)."""
  w_qk = spectrum.qk_from_kernels(wq_kernel, wk_kernel)
  return QKLayer(w_qk.reshape(-1, *w_qk.shape[-2:]), jnp.shape(wq_kernel)[-1])


def _kernel(node: Any) -> jax.Array | None:
  kernel = node.get("kernel") if isinstance(node, Mapping) else None
  return kernel if np.ndim(kernel) in (2, 3) else None


def _match(node: Mapping) -> QKLayer | None:
  """The attention layer whose parameters `node` holds, or None."""
  w_qk = node.get("w_qk")
  if np.ndim(w_qk) == 3 and w_qk.shape[-1] == w_qk.shape[-2]:
    num_heads, d = w_qk.shape[:2]
    # qkspec's models scale the joint W_QK's logits by sqrt(d / H)
    return QKLayer(w_qk, max(d // num_heads, 1))
  wq, wk = _kernel(node.get("query")), _kernel(node.get("key"))
  if wq is not None and wk is not None and wq.shape == wk.shape:
    return _from_kernels(wq, wk)
  return None


def _search(tree: Mapping, prefix: tuple = ()) -> dict[str, QKLayer]:
  """The attention layers at and below `tree` (at `prefix`) by path."""
  attention = _match(tree)
  if attention is not None:
    return {join_path(prefix): attention}
  found = {}
  for name, node in tree.items():
    if isinstance(node, Mapping):
      found.update(_search(node, prefix + (name,)))
  return found


def _lookup(tree: Mapping, ref: KernelRef, name: str) -> jax.Array:
  """The kernel `ref` names in `tree` (`qk_spec[name]`)."""
  if callable(ref):
    return jnp.asarray(ref(tree))
  node = tree
  for part in ref.split("/"):
    keys = {str(k): k for k in node} if isinstance(node, Mapping) else {}
    if part not in keys:
      raise ValueError(f"qk_spec[{name!r}]: no parameter {ref!r}.\n"
                       + _seen(tree))
    node = node[keys[part]]
  return node


def attention_layers(params_or_module: Any, qk_spec: QKSpec | None = None
                     ) -> dict[str, QKLayer]:
  """Every attention layer of `params_or_module` by its "/"-joined path.

  Found by parameter structure, or exactly the layers `qk_spec` names:
  {name: (query kernel, key kernel)}, each a path or a function of the
  parameter tree returning [d, H, D] or [d, D]. ValueError (listing the
  parameter paths seen) when nothing is found or a path names nothing.
  """
  tree = param_tree(params_or_module)
  if qk_spec is not None:
    return {name: _from_kernels(_lookup(tree, q, name), _lookup(tree, k, name))
            for name, (q, k) in qk_spec.items()}
  found = _search(tree)        # "" if the model is one attention layer
  if not found:
    raise ValueError(f"no attention layer found: looked for {LOOKED_FOR}. "
                     "Pass qk_spec={name: (query kernel path, key kernel "
                     "path)} for another layout.\n" + _seen(tree))
  return found


def qk_matrices(params_or_module: Any, qk_spec: QKSpec | None = None
                ) -> dict[str, jax.Array]:
  r""":math:`W_{QK} = W_Q^\top W_K` [H, d, d] of every attention layer,
  unscaled (as LocATER and Fig. 6B use it), by path (e.g. "Block_0/attn");
  differentiable with respect to the parameters."""
  return {path: a.w_qk
          for path, a in attention_layers(params_or_module, qk_spec).items()}


def locater_penalty(params_or_module: Any, hparams: locater.LocaterHParams,
                    qk_spec: QKSpec | None = None) -> jax.Array:
  r"""The LocATER penalty (Sec. 6) summed over layers and heads, a scalar.

  .. math:: P = \sum_{\ell, h} \kappa_1\,\mathrm{tr}(W_{QK}^\top W_{QK})
            + \kappa_2\,(\mathrm{tr}\,W_{QK} - \tau)^2

  with :math:`(\kappa_1, \kappa_2, \tau)` = `hparams`. Add it to the mean
  loss, as the paper prints :math:`J + P`; fairseq's reading adds
  :math:`P/N` for N targets per batch. Differentiable (`jax.grad`,
  `nnx.grad`).
  """
  return sum(jnp.sum(locater.locater_penalty(
      w_qk, hparams.kappa1, hparams.kappa2, hparams.target))
             for w_qk in qk_matrices(params_or_module, qk_spec).values())


SPECTRUM_COLUMNS = ("scale", "trace", "xi", "eta", "r")
_spectrum_stats = jax.jit(spectrum.spectrum_stats,
                          static_argnames="temperature")


def spectrum_table(params_or_module: Any, qk_spec: QKSpec | None = None
                   ) -> list[dict]:
  r"""Eigenspectrum statistics of every layer and head (Eqs. 5-8).

  One row per (path, head): `scale`, `trace`, `xi`, `eta` and `r` of
  `spectrum.spectrum_stats` (:math:`\Sigma = I`) at :math:`\lambda =
  \sqrt D`, as Flax's `dot_product_attention` scales the logits.
  """
  rows = []
  for path, a in attention_layers(params_or_module, qk_spec).items():
    lam = float(softmax.temperature(None, a.head_dim))
    # with Sigma = I, spectrum_stats' trace tr(sym(W_QK)) is tr W_QK
    stats = jax.device_get(_spectrum_stats(a.w_qk, temperature=lam))
    rows += [dict(path=path, head=h, **{c: float(stats[c][h])
                                        for c in SPECTRUM_COLUMNS})
             for h in range(a.w_qk.shape[0])]
  return rows
