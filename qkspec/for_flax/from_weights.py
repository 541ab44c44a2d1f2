r"""Entropy and rho_i from the attention probabilities a model returns.

Shapes: B = batch, H = heads, T = queries, S = keys.

For any model that can return its attention probabilities, one [B, H, T, S]
array per layer: Hugging Face's `outputs.attentions` with
`output_attentions=True`, a linen model's sown `attention_weights`.
Softmax and Definition 1's :math:`u_i` see the logits only up to a shift
per query, so the log-probabilities stand for them: :math:`\rho_i` is the
same number `attention_table` computes from the logits.
"""
# pylint: disable=invalid-name
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from qkspec.for_flax import qk
from qkspec.for_flax import stats


def _check_probabilities(l: int, probs: np.ndarray, visible: np.ndarray,
                         eps: float) -> None:
  """ValueError unless `probs` are rows of probabilities over the visible
  keys: no negative entry, sums 1 within max(1e-3, S eps)."""
  if np.any(probs < 0):
    raise ValueError(f"weights[{l}] must be probabilities, got a minimum of "
                     f"{probs.min():.3g}.")
  tol = max(1e-3, probs.shape[-1] * eps)
  sums = np.sum(np.where(visible, probs, 0.0), axis=-1)
  bad = np.any(visible, axis=-1) & (np.abs(sums - 1.0) > tol)
  if np.any(bad):
    raise ValueError(f"weights[{l}] rows must sum to 1 over the visible keys "
                     f"(within {tol:.2g}), got {sums[bad].flat[0]:.6g}: pass "
                     "the probabilities, not the logits.")


def attention_table_from_weights(weights: Sequence[jax.Array],
                                 mask: jax.Array | None = None) -> list[dict]:
  r"""Entropy and :math:`\rho_i` of every head from its probabilities.

  Args:
    weights: one [B, H, T, S] array of attention probabilities per layer
      (`outputs.attentions`), any float dtype.
    mask: None, or the [B, S] padding mask the model was given, 1 marking a
      token (Hugging Face's `attention_mask`). Keys it hides are not seen;
      when T = S it marks the queries too.

  Returns:
    One row per (layer, head): `layer` (the index in `weights`), `head`,
    `entropy` (Zhai's, mean over the visible queries, in nats, of the
    probabilities renormalised over the visible keys) and `rho` [S] (a
    list; Definition 1 from each sequence's last visible query, the
    log-probabilities of its visible keys standing for the logits;
    probabilities under float32's smallest normal count as it; NaN for a
    key no sequence sees). Float32.
  """
  if isinstance(weights, jax.Array) or not isinstance(weights, Sequence):
    raise ValueError("weights must be a sequence of [B, H, T, S] arrays, one "
                     f"per layer, got {type(weights).__name__}.")
  if qk.is_traced((weights, mask)):
    raise ValueError("attention_table_from_weights returns Python numbers: "
                     "call it outside jax.jit, grad or vmap.")
  rows = []
  for l, w in enumerate(weights):
    probs = np.asarray(w, np.float32)
    if probs.ndim != 4:
      raise ValueError(f"weights[{l}] must be [B, H, T, S], got shape "
                       f"{probs.shape}.")
    B, _, T, S = probs.shape
    token_BxS = np.ones((B, S), bool) if mask is None else np.asarray(mask)
    if token_BxS.shape != (B, S):
      raise ValueError(f"mask must be [B, S] = {(B, S)} like weights[{l}] "
                       f"{probs.shape}, got {token_BxS.shape}.")
    token_BxS = token_BxS.astype(bool)
    query_Bx1xTx1 = (token_BxS if T == S else np.ones((B, T), bool))[
        :, None, :, None]
    visible_BxHxTxS = np.broadcast_to(
        token_BxS[:, None, None, :] & query_Bx1xTx1, probs.shape)
    eps = float(jnp.finfo(getattr(w, "dtype", np.float32)).eps)
    _check_probabilities(l, probs, visible_BxHxTxS, eps)
    scores_BxHxTxS = np.log(np.maximum(probs, np.finfo(np.float32).tiny))
    measured = jax.device_get(stats.head_stats(
        scores_BxHxTxS, visible_BxHxTxS, visible_BxHxTxS.any(axis=-1)))
    rows += [dict(layer=l, head=h, entropy=float(measured["entropy"][h]),
                  rho=measured["rho"][h].tolist())
             for h in range(len(measured["entropy"]))]
  return rows
