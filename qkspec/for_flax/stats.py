r"""Entropy, :math:`\rho_i` and rank collapse of attention, mask aware.

Shapes: B = batch, H = heads, T = queries, S = keys, d = width.

The measurements come from the probabilities a layer computed: softmax and
the linearised score :math:`u_i` (Sec. 2) see the logits only up to a shift
per query, so the log-probabilities stand for them. `visible` [B, H, T, S]
marks the keys each query may see; `query_ok` [B, H, T] the queries that
are tokens (not padding). The maths is `qkspec.theory`'s, given the masks.
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.theory import diagnostics
from qkspec.theory import propagation


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
  r"""Definition 1's :math:`\rho_i` [H, S] from each sequence's last token:
  `propagation.empirical_rho` over the sequences of the scores of the last
  query with `query_ok`, over its visible keys (NaN for a key no sequence's
  last query sees)."""
  T = scores_BxHxTxS.shape[-2]
  last_BxH = jnp.max(jnp.where(query_ok_BxHxT, jnp.arange(T)[None, None],
                               -1), axis=-1)
  take = lambda a: jnp.take_along_axis(  # noqa: E731
      a, jnp.maximum(last_BxH, 0)[:, :, None, None], axis=-2)[:, :, 0]
  seen_BxHxS = take(visible_BxHxTxS) & (last_BxH >= 0)[:, :, None]
  return jax.vmap(lambda omega, seen: propagation.empirical_rho(
      omega, mask=seen), in_axes=1)(take(scores_BxHxTxS), seen_BxHxS)


@jax.jit
def probability_stats(probs_BxHxTxS: jax.Array, visible_BxHxTxS: jax.Array,
                      query_ok_BxHxT: jax.Array) -> dict[str, jax.Array]:
  r"""`entropy` [H]: Zhai's :math:`-\sum_j A_{tj}\log A_{tj}` over the
  visible keys (`diagnostics.attention_entropy`, the probabilities
  renormalised over them), the mean over the batch's token queries; `rho`
  [H, S]: `last_query_rho` of the log-probabilities (those under float32's
  smallest normal count as it). Float32."""
  probs_BxHxTxS = probs_BxHxTxS.astype(jnp.float32)
  tiny = jnp.finfo(jnp.float32).tiny
  keys_BxHxTxS = visible_BxHxTxS & query_ok_BxHxT[..., None]
  scores_BxHxTxS = jnp.log(jnp.maximum(probs_BxHxTxS, tiny))
  renormalised = jax.nn.softmax(jnp.where(
      keys_BxHxTxS, scores_BxHxTxS, jnp.finfo(jnp.float32).min), axis=-1)
  entropy_H = jax.vmap(diagnostics.attention_entropy, in_axes=(1, 1))(
      renormalised, keys_BxHxTxS)
  return dict(entropy=entropy_H, rho=last_query_rho(
      scores_BxHxTxS, visible_BxHxTxS, query_ok_BxHxT))


@jax.jit
def rank_residual(out_BxTxd: jax.Array, token_BxT: jax.Array) -> jax.Array:
  r"""Dong's "mean" relative residual :math:`\|X - \mathbf 1 \bar x^\top\|_F
  / \|X\|_F` of each sequence's token rows (`token_BxT`,
  `diagnostics.relative_residual`), the mean over the sequences with
  tokens."""
  ratio_B = diagnostics.relative_residual(out_BxTxd.astype(jnp.float32),
                                          mask=token_BxT)
  real_B = jnp.any(token_BxT, axis=-1)
  return jnp.sum(jnp.where(real_B, ratio_B, 0)) / jnp.maximum(
      jnp.sum(real_B), 1)
