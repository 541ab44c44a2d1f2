r"""QK-norm: the norms some attention layers put on queries and keys.

Shapes: L = stacked layers, d = model width, N / K = query / key heads,
D = head width.

A layer with QK-norm (ViT-22B; flax's `normalize_qk`, Gemma 3 and 4,
Qwen3, OLMo 2) computes its logits from :math:`\hat q = n(q)` and
:math:`\hat k = n(k)`, each norm over one head's D features with gains
:math:`g` (query) and :math:`h` (key):

.. math:: \hat q = \frac{q\,C}{\sigma(q)} \odot g,\qquad
          \hat q^\top \hat k = \frac{x_t^\top K_q\,C\,\mathrm{diag}(g)
          \,\mathrm{diag}(h)\,C\,K_k^\top x_j}{\sigma(q_t)\,\sigma(k_j)}

where :math:`q = x K_q`, :math:`\sigma` is the per-token root mean square
(of the centred vector for LayerNorm), and :math:`C = I - \mathbf 1\mathbf
1^\top/D` the centring of LayerNorm (:math:`C = I` for RMSNorm). qkspec
folds the gains and the centring into the kernels, :math:`K_q \to K_q C
\mathrm{diag}(g)` and :math:`K_k \to K_k C \mathrm{diag}(h)`, so that
:math:`W_{QK}` is the bilinear form the logits use; the per-token factor
:math:`1/(\sigma(q_t)\sigma(k_j))` depends on the input, not on the
parameters, and is left out. (Refusing instead would leave every QK-norm
model without a spectrum or a penalty; ignoring the gains would give one
that is not the model's: once trained they move far from 1.) A norm's bias
(LayerNorm's, after the normalisation) is left out, as the projections'
biases are.

How a norm applies its gains is not in the parameters, so it is read from
the norm's name, as each library's source defines it:

====================  =================================  ===============
names                 written by                         gains
====================  =================================  ===============
query_ln, key_ln      flax `normalize_qk` (LayerNorm)    scale, centred
query_norm, key_norm  MaxText `RMSNorm`; gemma 4         scale
_query_norm, ...      gemma 2/3 `RMSNorm`                1 + scale
q_norm, k_norm        bonsai: Qwen3 (nnx.RMSNorm),       ambiguous:
                      Gemma 3 (`Gemma3RMSNorm`, 1 +      `qk_norm`
                      scale)
====================  =================================  ===============

An nnx Module says its norms' classes: flax's `nnx.LayerNorm` and
`nnx.RMSNorm` are read as such whatever their names. `qk_norm` ("layer",
"rms" or "rms_one_plus", or {layer path: form}) says it for every layer or
some. A norm without parameters (`use_scale=False`) is not seen: RMSNorm's
then changes no bilinear form; LayerNorm's centring is then left out.
"""
# pylint: disable=invalid-name
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp

FORMS = ("layer", "rms", "rms_one_plus")
QKNorm = str | Mapping[str, str] | None
# (query norm, key norm) names and how they apply their gains, None where
# the name alone does not say
NAMES = {("query_ln", "key_ln"): "layer",
         ("query_norm", "key_norm"): "rms",
         ("_query_norm", "_key_norm"): "rms_one_plus",
         ("q_norm", "k_norm"): None}
_GAIN_PARAMS = ("scale", "w")     # flax, MaxText, gemma; bonsai's first Qwen3


class Norm(NamedTuple):
  """One QK-norm as the logits see it: `gain` [D] (or stacked, [L, D] or
  [D, L]) multiplies the normalised vector; `centred`: LayerNorm's mean
  subtraction comes first."""
  gain: jax.Array
  centred: bool


def module_forms(module: Any) -> dict[str, str]:
  """{path: form} of the flax `nnx.LayerNorm` and `nnx.RMSNorm` in an nnx
  Module (empty for anything else)."""
  # pylint: disable=g-import-not-at-top
  from flax import nnx
  if not isinstance(module, nnx.Module):
    return {}
  kinds = ((nnx.LayerNorm, "layer"), (nnx.RMSNorm, "rms"))
  return {"/".join(map(str, path)): form for path, m in nnx.iter_modules(
      module) for cls, form in kinds if type(m) is cls}   # pylint: disable=unidiomatic-typecheck


def check_forms(qk_norm: QKNorm) -> None:
  """ValueError unless `qk_norm` is None, a form, or {path: form}."""
  forms = qk_norm.values() if isinstance(qk_norm, Mapping) else (
      [] if qk_norm is None else [qk_norm])
  for form in forms:
    if form not in FORMS:
      raise ValueError(f"qk_norm must be one of {FORMS} (or {{layer path: "
                       f"form}}), got {form!r}.")


def _gain(node: Any) -> Any:
  if not isinstance(node, Mapping):
    return None
  return next((node[p] for p in _GAIN_PARAMS if p in node), None)


def _form(path: str, names: tuple[str, str], default: str | None,
          qk_norm: QKNorm, classes: Mapping[str, str]) -> str:
  """How the norms `names` of the layer at `path` apply their gains."""
  given = qk_norm.get(path) if isinstance(qk_norm, Mapping) else qk_norm
  if given is not None:
    return given
  full = ["/".join(p for p in (path, n) if p) for n in names]
  found = {classes[p] for p in full if p in classes}
  if len(found) == 1:
    return found.pop()
  if default is None:
    raise ValueError(
        f"{path!r}: its QK-norm {names[0]!r}/{names[1]!r} multiplies by its "
        "scale in some libraries (bonsai's Qwen3, nnx.RMSNorm) and by 1 + "
        "scale in others (bonsai's Gemma 3): pass qk_norm='rms' or "
        f"'rms_one_plus' (or {{{path!r}: form}}).")
  return default


def find(node: Mapping, path: str, qk_norm: QKNorm,
         classes: Mapping[str, str]) -> tuple[Norm | None, Norm | None]:
  """The (query, key) norms of the attention layer whose parameters `node`
  (at `path`) holds, each None if absent; `classes` as `module_forms`."""
  for names, default in NAMES.items():
    gains = [_gain(node.get(n)) for n in names]
    if all(g is None for g in gains):
      continue
    form = _form(path, names, default, qk_norm, classes)
    return tuple(None if g is None else Norm(
        jnp.asarray(g) + (1.0 if form == "rms_one_plus" else 0.0),
        form == "layer") for g in gains)
  return None, None


def layer_of(norm: Norm | None, l: int | None, axis: int | None,
             head_dim: int, path: str) -> Norm | None:
  """Layer `l` of a stacked norm (stacked on `axis` as its kernels: [L, D]
  on axis 0, [D, L] on axis 1), checked to hold `head_dim` gains."""
  if norm is None:
    return None
  gain = norm.gain
  if l is not None and gain.ndim == 2:
    gain = jnp.take(gain, l, axis=min(axis, 1))
  if gain.shape != (head_dim,):
    raise ValueError(
        f"{path!r}: QK-norm gains {tuple(norm.gain.shape)} are not one per "
        f"feature of a head (D = {head_dim}): a norm over all heads at once "
        "(OLMo's) is not covered; pass qk_spec with kernels it is folded "
        "into.")
  return Norm(gain, norm.centred)


def fold(kernel: jax.Array, norm: Norm | None) -> jax.Array:
  r""":math:`K C \mathrm{diag}(g)` of a kernel [..., D] and its norm
  (:math:`C` only if centred), in float32 for 16-bit parameters."""
  kernel = kernel.astype(jnp.promote_types(kernel.dtype, jnp.float32))
  if norm is None:
    return kernel
  if norm.centred:    # K C = K - (K 1) 1^T / D
    kernel = kernel - jnp.mean(kernel, axis=-1, keepdims=True)
  gain = norm.gain.astype(kernel.dtype)
  return kernel * gain.reshape((1,) * (kernel.ndim - 1) + gain.shape)
