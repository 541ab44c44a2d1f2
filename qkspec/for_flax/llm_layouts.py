r"""The query and key kernels of gemma's attention and MaxText's fused one.

Shapes: L = stacked layers, d = model width, N = query heads, K = key heads,
D = head width.

Each reading follows the library's own einsums, so the names decide it (a
gemma kernel [N, d, D] has the shape a [d, N, D] one could have):

=========================================  =================  ==============
parameters of a node                       written by         read as
=========================================  =================  ==============
q_einsum/w [N, d, D], kv_einsum/w          gemma (Gemma 2/3,  query
[2, K, d, D]                               grouped-query)     w.transpose(1,
                                                              0, 2), key
                                                              kv[0] likewise
qkv_einsum/w [3, N, d, D]                  gemma (K = N)      w[0], w[1]
q_einsum/w, k_einsum/w [K, d, D]           gemma 4 (k = v)    w, w
qkv_proj/kernel [d, N + 2K, D] beside      MaxText            [:, :N],
out/kernel [N, D, e]                       (`fused_qkv`)      [:, N:N + K]
=========================================  =================  ==============

(`'BTD,NDH->BTNH'`, `'BSD,CKDH->CBSKH'`, `'BTD,SNDH->SBTNH'`; MaxText splits
its fused projection's heads at N and N + K, and its out kernel says N.)
MaxText's scanned stacks put the layer axis second: qkv_proj
[d, L, N + 2K, D] beside out [N, L, D, e].
"""
# pylint: disable=invalid-name
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from qkspec.for_flax import layouts


def _gemma_kernels(node: Mapping, path: str
                   ) -> tuple[jax.Array, jax.Array] | None:
  """gemma's query and key einsum weights, [N, d, D] and [K, d, D]."""
  w = lambda name: layouts.kernel(node.get(name))  # noqa: E731
  fused, q, kv, k = (w(n) for n in ("qkv_einsum", "q_einsum", "kv_einsum",
                                     "k_einsum"))
  if fused is not None:
    if np.ndim(fused) != 4 or np.shape(fused)[0] != 3:
      raise ValueError(f"{path!r}: gemma's qkv_einsum/w must be [3, N, d, D], "
                       f"got {np.shape(fused)}.")
    return jnp.asarray(fused)[0], jnp.asarray(fused)[1]
  if q is None or (kv is None and k is None):
    return None
  if kv is not None:
    if np.ndim(kv) != 4 or np.shape(kv)[0] != 2:
      raise ValueError(f"{path!r}: gemma's kv_einsum/w must be [2, K, d, D], "
                       f"got {np.shape(kv)}.")
    k = jnp.asarray(kv)[0]
  for name, x in (("q_einsum", q), ("k_einsum", k)):
    if np.ndim(x) != 3:
      raise ValueError(f"{path!r}: gemma's {name}/w must be [heads, d, D], "
                       f"got {np.shape(x)} (stacks are not gemma's).")
  return jnp.asarray(q), jnp.asarray(k)


def _maxtext_fused(path: str, kernel: Any, out: Any,
                   heads: layouts.Heads | None) -> layouts.Projections:
  """MaxText's fused projection [d, N + 2K, D] (or [d, L, N + 2K, D])
  beside its out kernel [N, D, e] (or [N, L, D, e])."""
  kernel = jnp.asarray(kernel)
  o = tuple(np.shape(out)) if out is not None else None
  stacked = kernel.ndim == 4
  want = ((kernel.shape[1],) if stacked else ()) + (kernel.shape[-1],)
  if kernel.ndim not in (3, 4) or o is None or len(o) != kernel.ndim or (
      o[1:-1] != want):
    raise ValueError(
        f"{path!r}: a fused qkv_proj/kernel {tuple(kernel.shape)} is read as "
        "MaxText's [d, N + 2K, D] (scanned: [d, L, N + 2K, D]) beside an "
        "out/kernel [N, D, d] ([N, L, D, d]) that says N, but the out "
        f"kernel is {o}: pass qk_spec.")
  N, M = o[0], kernel.shape[-2]
  K = (M - N) // 2
  if K < 1 or N + 2 * K != M or N % K:
    raise ValueError(f"{path!r}: qkv_proj/kernel {tuple(kernel.shape)} holds "
                     f"{M} heads, not N + 2K with N = {N} (from the out "
                     f"kernel {o}) and K dividing N.")
  q, k = kernel[..., :N, :], kernel[..., N:N + K, :]
  axis = 1 if stacked else None
  layouts.check_pair(path, np.delete(q.shape, axis or []),
                     np.delete(k.shape, axis or []), heads)
  return layouts.Projections(q, k, axis)


def projections(node: Mapping, path: str, heads: layouts.Heads | None
                ) -> layouts.Projections | None:
  """The query and key kernels of the gemma and MaxText layouts (module
  docstring) that `node` (at `path`) holds, or None."""
  gemma = _gemma_kernels(node, path)
  if gemma is not None:
    q, k = (jnp.swapaxes(x, 0, 1) for x in gemma)     # -> [d, heads, D]
    layouts.check_pair(path, q.shape, k.shape, heads)
    return layouts.Projections(q, k, None)
  fused = layouts.kernel(node.get("qkv_proj"))
  if fused is not None:
    return _maxtext_fused(path, fused, layouts.kernel(node.get("out")),
                          heads)
  return None
