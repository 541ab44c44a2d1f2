r"""Entropy, :math:`\rho_i` and rank collapse of attention scores, mask aware.

Shapes: B = batch, H = heads, T = queries, S = keys, d = width.

`scores` are the logits :math:`\omega_{tj}` (scaled by the temperature) or
any per-query shift of them, such as the log-probabilities a model returns:
softmax and the linearised score :math:`u_i` (Sec. 2) do not see a shift.
`visible` [B, H, T, S] marks the keys each query may see; `query_ok`
[B, H, T] the queries that are tokens (not padding).
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.theory import diagnostics


def query_tokens(visible_BxHxTxS: jax.Array, self_attention: bool
                 ) -> jax.Array:
  """[B, H, T]: the queries that see a key and, in self-attention (T = S),
  whose own position is a key some query sees, so that a mask that only
  hides padded keys also drops the padded queries."""
  ok_BxHxT = jnp.any(visible_BxHxTxS, axis=-1)
  T, S = visible_BxHxTxS.shape[-2:]
  if self_attention and T == S:
    ok_BxHxT &= jnp.any(visible_BxHxTxS, axis=-2)
  return ok_BxHxT


def last_query_rho(scores_BxHxTxS: jax.Array, visible_BxHxTxS: jax.Array,
                   query_ok_BxHxT: jax.Array) -> jax.Array:
  r"""Definition 1's :math:`\rho_i` [H, S] from each sequence's last token.

  For query :math:`t^*`, the last with `query_ok`, and its :math:`n`
  visible keys, :math:`u_i = (\omega_i - \bar\omega)/n + 1/n`
  (:math:`\bar\omega` their mean), and :math:`\rho_i` is the fraction of
  the sequences that see key i in which :math:`u_i \in [0, 1]`: NaN for a
  key no sequence sees.
  """
  T = scores_BxHxTxS.shape[-2]
  last_BxH = jnp.max(jnp.where(query_ok_BxHxT, jnp.arange(T)[None, None],
                               -1), axis=-1)
  take = lambda a: jnp.take_along_axis(  # noqa: E731
      a, jnp.maximum(last_BxH, 0)[:, :, None, None], axis=-2)[:, :, 0]
  seen_BxHxS = take(visible_BxHxTxS) & (last_BxH >= 0)[:, :, None]
  omega_BxHxS = jnp.where(seen_BxHxS, take(scores_BxHxTxS), 0.0)
  n_BxHx1 = jnp.maximum(jnp.sum(seen_BxHxS, axis=-1, keepdims=True), 1)
  mean_BxHx1 = jnp.sum(omega_BxHxS, axis=-1, keepdims=True) / n_BxHx1
  u_BxHxS = (omega_BxHxS - mean_BxHx1) / n_BxHx1 + 1.0 / n_BxHx1
  event_BxHxS = seen_BxHxS & (u_BxHxS >= 0.0) & (u_BxHxS <= 1.0)
  count_HxS = jnp.sum(seen_BxHxS, axis=0)
  return jnp.where(count_HxS > 0, jnp.sum(event_BxHxS, axis=0)
                   / jnp.maximum(count_HxS, 1), jnp.nan)


@jax.jit
def head_stats(scores_BxHxTxS: jax.Array, visible_BxHxTxS: jax.Array,
               query_ok_BxHxT: jax.Array) -> dict[str, jax.Array]:
  r"""`entropy` [H]: Zhai's :math:`-\sum_j A_{tj}\log A_{tj}` of
  :math:`A = \mathrm{softmax}(\omega)` over the visible keys, the mean over
  the batch's token queries; `rho` [H, S]: `last_query_rho`. Float32."""
  scores_BxHxTxS = scores_BxHxTxS.astype(jnp.float32)
  keys_BxHxTxS = visible_BxHxTxS & query_ok_BxHxT[..., None]
  probs_BxHxTxS = jax.nn.softmax(jnp.where(
      keys_BxHxTxS, scores_BxHxTxS, jnp.finfo(jnp.float32).min), axis=-1)
  entropy_H = jax.vmap(diagnostics.attention_entropy, in_axes=(1, 1))(
      probs_BxHxTxS, keys_BxHxTxS)
  return dict(entropy=entropy_H, rho=last_query_rho(
      scores_BxHxTxS, visible_BxHxTxS, query_ok_BxHxT))


@jax.jit
def rank_residual(out_BxTxd: jax.Array, token_BxT: jax.Array) -> jax.Array:
  r"""Dong's "mean" relative residual :math:`\|X - \mathbf 1 \bar x^\top\|_F
  / \|X\|_F` of each sequence's token rows (`token_BxT`), the batch mean
  (as `diagnostics.relative_residual` without padding)."""
  x_BxTxd = jnp.where(token_BxT[..., None], out_BxTxd.astype(jnp.float32), 0)
  n_Bx1x1 = jnp.sum(token_BxT, axis=-1)[:, None, None]
  mean_Bx1xd = jnp.sum(x_BxTxd, axis=-2, keepdims=True) / jnp.maximum(
      n_Bx1x1, 1)
  res_BxTxd = jnp.where(token_BxT[..., None], x_BxTxd - mean_Bx1xd, 0)
  norm_B = jnp.sqrt(jnp.sum(x_BxTxd**2, axis=(-2, -1)))
  ratio_B = jnp.sqrt(jnp.sum(res_BxTxd**2, axis=(-2, -1))) / jnp.where(
      norm_B > 0, norm_B, 1.0)
  real_B = n_Bx1x1[:, 0, 0] > 0
  return jnp.sum(jnp.where(real_B, ratio_B, 0)) / jnp.maximum(
      jnp.sum(real_B), 1)
