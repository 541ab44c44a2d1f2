r"""Entropy and rho_i from the attention probabilities a model returns.

Shapes: B = batch, H = heads, T = queries, S = keys.

For any model that can return its attention probabilities, one array per
layer: Hugging Face's `outputs.attentions` with `output_attentions=True`, a
linen model's sown `attention_weights` ([B, H, T, S]), gemma's
`attention_weights` intermediates ([B, T, H, S], `layout="BTHS"`).
Softmax and Definition 1's :math:`u_i` see the logits only up to a shift
per query, so the log-probabilities stand for them: :math:`\rho_i` is the
same number `attention_table` computes.

The tables take the mask as the truth about which keys each query sees. A
probability of exactly 0 is no evidence of a hidden key (a softmax
underflows; a model may hide keys its mask does not say): a key the mask
leaves visible counts as visible, its log-probability the log of float32's
smallest normal. So give a local (sliding-window) or causal layer its
per-query mask, [B, T, S] or [B, H, T, S].
"""
# pylint: disable=invalid-name
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from qkspec.for_flax import qk
from qkspec.for_flax import stats
from qkspec.theory import _checks

LAYOUTS = ("BHTS", "BTHS")


def _visible(mask, shape: tuple, l: int) -> np.ndarray:
  """Bool [B, H, T, S]: the keys each query sees, from a [B, S], [B, T, S]
  or [B, H, T, S] mask (None: all)."""
  B, H, T, S = shape
  if mask is None:
    return np.ones(shape, bool)
  m = np.asarray(mask).astype(bool)
  if m.shape == (B, S):       # a padding mask: keys, and queries if T = S
    queries = m if T == S else np.ones((B, T), bool)
    m = m[:, None, None, :] & queries[:, None, :, None]
  elif m.shape == (B, T, S):
    m = m[:, None]
  elif m.shape[:1] + m.shape[2:] != (B, T, S) or m.shape[1] not in (1, H):
    raise ValueError(f"mask must be [B, S], [B, T, S] or [B, H, T, S] with "
                     f"(B, H, T, S) = {shape} as weights[{l}] has, got "
                     f"{m.shape}.")
  return np.broadcast_to(m, shape)


def attention_table_from_weights(weights: Sequence[jax.Array],
                                 mask: jax.Array | None = None,
                                 layout: str = "BHTS") -> list[dict]:
  r"""Entropy and :math:`\rho_i` of every head from its probabilities.

  Args:
    weights: one array of attention probabilities per layer
      (`outputs.attentions`), any float dtype, [B, H, T, S] (or as
      `layout` says).
    mask: None, or which keys each query sees, 1 or True where it does:
      the [B, S] padding mask the model was given (Hugging Face's
      `attention_mask`: keys, and when T = S the queries too), or a
      per-query mask [B, T, S] or [B, H, T, S] (causal, sliding-window);
      or a list of them, one per layer (gemma's local and global layers).
      In self-attention (T = S) a query whose own position no query sees
      is padding.
    layout: "BHTS", or "BTHS" for probabilities [B, T, H, S] (gemma's).

  Returns:
    One row per (layer, head): `layer` (the index in `weights`), `head`,
    `entropy` (Zhai's, mean over the visible queries, in nats, of the
    probabilities renormalised over the visible keys) and `rho` [S] (a
    list; Definition 1 from each sequence's last visible query, the
    log-probabilities of its visible keys standing for the logits; NaN for
    a key no sequence sees). Float32.
  """
  if isinstance(weights, jax.Array) or not isinstance(weights, Sequence):
    raise ValueError("weights must be a sequence of [B, H, T, S] arrays, one "
                     f"per layer, got {type(weights).__name__}.")
  _checks.choice("layout", layout, LAYOUTS)
  if qk.is_traced((list(weights), mask)):
    raise ValueError("attention_table_from_weights returns Python numbers: "
                     "call it outside jax.jit, grad or vmap.")
  masks = list(mask) if isinstance(mask, (list, tuple)) else [mask] * len(
      weights)
  if len(masks) != len(weights):
    raise ValueError(f"mask lists {len(masks)} masks for {len(weights)} "
                     "layers: give one per layer, or one for all.")
  rows = []
  for l, (w, mask) in enumerate(zip(weights, masks)):
    probs = np.asarray(w, np.float32)
    if probs.ndim != 4:
      raise ValueError(f"weights[{l}] must be [B, H, T, S] ({layout}), got "
                       f"shape {probs.shape}.")
    if layout == "BTHS":
      probs = np.swapaxes(probs, 1, 2)
    visible_BxHxTxS = _visible(mask, probs.shape, l)
    eps = float(jnp.finfo(getattr(w, "dtype", np.float32)).eps)
    _checks.probabilities(f"weights[{l}]", probs, visible_BxHxTxS,
                          tol=max(1e-3, probs.shape[-1] * eps))
    T, S = probs.shape[-2:]
    measured = jax.device_get(stats.probability_stats(
        probs, visible_BxHxTxS, stats.query_tokens(visible_BxHxTxS, T == S)))
    rows += [dict(layer=l, head=h, entropy=float(measured["entropy"][h]),
                  rho=measured["rho"][h].tolist())
             for h in range(len(measured["entropy"]))]
  return rows
