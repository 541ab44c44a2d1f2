r"""Attention entropy (Zhai et al. 2023) and rank collapse (Dong et al. 2021).

Shapes: T = tokens (rows of X), d = features; probs are [..., Tq, Tk].
"""
import jax
import jax.numpy as jnp

from qkspec.theory import _checks

RESIDUAL_METHODS = ("mean", "svd", "composite")


def attention_entropy(probs: jax.Array, mask: jax.Array | None = None,
                      reduce: bool = True) -> jax.Array:
  r"""Shannon entropy of attention rows (Zhai et al. 2023, Sec. 3).

  .. math:: \mathrm{Ent}(A_t) = -\sum_{j \in \mathcal V(t)} A_{tj}\log A_{tj}

  over the keys :math:`\mathcal V(t)` query t may see (`mask` True,
  broadcastable to `probs`; a row with none is left out of the mean), with
  :math:`0 \log 0 = 0`. Concrete `probs` that are not probabilities over
  the visible keys raise ValueError. `reduce`: the mean over all valid rows
  in nats, else per row (0 for rows left out).
  """
  probs = jnp.asarray(probs)
  _checks.seq_axis_length("probs", probs, -1, minimum=1)
  _checks.probabilities("probs", probs, mask)
  terms = -jax.scipy.special.xlogy(probs, probs)
  if mask is None:
    per_row = jnp.sum(terms, axis=-1)
    return jnp.mean(per_row) if reduce else per_row
  mask = jnp.broadcast_to(mask, probs.shape)
  per_row = jnp.sum(jnp.where(mask, terms, 0.0), axis=-1)
  if not reduce:
    return per_row
  valid = jnp.any(mask, axis=-1)
  return jnp.sum(jnp.where(valid, per_row, 0.0)) / jnp.maximum(
      jnp.sum(valid), 1)


def eq9_entropy(nu: jax.Array, seq_len: int) -> jax.Array:
  r"""Eq. (9) as printed, which is NOT a lower bound on attention entropy.

  .. math:: \ln(1 + T e^{-\nu}) + \frac{\nu e^{-\nu/2}}{T^{-1} + e^{-\nu}},
            \qquad \nu = \|XX^\top\|_2\,\|W_{QK}\|_2.

  It is :math:`\ln(1+T) > \ln T` at :math:`\nu = 0`, above the maximum
  entropy on :math:`[0, \nu^*]`; Zhai et al.'s true bound is
  `entropy_bounds.zhai_entropy_lower_bound`. Float32 nats, the shape of
  `nu` >= 0.
  """
  t = _checks.positive_int("seq_len", seq_len, minimum=1)
  _checks.nonnegative("nu", nu)
  nu = jnp.asarray(nu, dtype=jnp.float32)
  return (jnp.log1p(t * jnp.exp(-nu))
          + nu * jnp.exp(-nu / 2) / (1.0 / t + jnp.exp(-nu)))


def composite_norm(x: jax.Array) -> jax.Array:
  r"""Dong et al.'s composite norm :math:`\sqrt{\|X\|_1\|X\|_\infty}` of
  x [..., T, d] (induced norms: largest absolute column / row sum)."""
  _checks.min_ndim("x", x, 2, "[..., T, d]")
  abs_x = jnp.abs(x)
  norm_1 = jnp.max(jnp.sum(abs_x, axis=-2), axis=-1)
  norm_inf = jnp.max(jnp.sum(abs_x, axis=-1), axis=-1)
  return jnp.sqrt(norm_1 * norm_inf)


def _composite_argmin(x_Txd, num_steps):
  """min_c ||X - 1 c^T||_{1,inf} from above for one [T, d] matrix:
  normalised subgradient descent from the column-wise median."""
  def objective(c_d):
    return composite_norm(x_Txd - c_d[None, :])
  grad = jax.grad(objective)
  c0 = jnp.median(x_Txd, axis=0)
  a0 = 0.5 * jnp.mean(jnp.abs(x_Txd - c0[None, :])) + 1e-30

  def body(k, carry):
    c, best_f = carry
    g = grad(c)
    c = c - a0 / jnp.sqrt(k + 1.0) * g / (jnp.linalg.norm(g) + 1e-30)
    f = objective(c)
    return c, jnp.where(f < best_f, f, best_f)

  _, best_f = jax.lax.fori_loop(0, num_steps, body, (c0, objective(c0)))
  return best_f


def rank_collapse_residual(x: jax.Array, method: str = "mean",
                           num_steps: int = 300,
                           mask: jax.Array | None = None) -> jax.Array:
  r"""Norm of Dong et al.'s residual :math:`X - \mathbf 1 x^\top`, [...].

  Of x [..., T, d], by `method`: "mean", the Frobenius norm with x the
  token mean (as Dong et al.'s code); "svd", the Frobenius distance to the
  best rank-1 matrix, :math:`\sqrt{\sum_{k \ge 2}\sigma_k^2}`;
  "composite", :math:`\min_x \|X - \mathbf 1 x^\top\|_{1,\infty}` (their
  Sec. 2) from above, by `num_steps` of subgradient descent. `mask`
  [..., T] ("mean" only): the rows that are tokens, the others (padding)
  left out.
  """
  _checks.choice("method", method, RESIDUAL_METHODS)
  _checks.min_ndim("x", x, 2, "[..., T, d]")
  if mask is not None and method != "mean":
    raise ValueError(f"a mask is taken with method='mean' only, got "
                     f"method={method!r}.")
  if method == "mean":
    if mask is None:
      res = x - jnp.mean(x, axis=-2, keepdims=True)
      return jnp.sqrt(jnp.sum(res**2, axis=(-2, -1)))
    rows = jnp.broadcast_to(mask, jnp.shape(x)[:-1]).astype(bool)[..., None]
    n = jnp.maximum(jnp.sum(rows, axis=-2, keepdims=True), 1)
    mean = jnp.sum(jnp.where(rows, x, 0.0), axis=-2, keepdims=True) / n
    res = jnp.where(rows, x - mean, 0.0)
    return jnp.sqrt(jnp.sum(res**2, axis=(-2, -1)))
  if method == "svd":
    sigma = jnp.linalg.svd(x, compute_uv=False)
    return jnp.sqrt(jnp.sum(sigma[..., 1:]**2, axis=-1))
  flat = x.reshape((-1,) + x.shape[-2:])
  out = jax.vmap(lambda m: _composite_argmin(m, num_steps))(flat)
  return out.reshape(x.shape[:-2])


def relative_residual(x: jax.Array, method: str = "mean",
                      num_steps: int = 300,
                      mask: jax.Array | None = None) -> jax.Array:
  r""":math:`\|\mathrm{res}(X)\| / \|X\|` in `method`'s norm (Dong et al.);
  0 when the tokens have collapsed to one row. `mask` [..., T] ("mean"
  only): the token rows, as `rank_collapse_residual`; NaN where none is."""
  res = rank_collapse_residual(x, method, num_steps, mask)
  if method == "composite":
    return res / composite_norm(x)
  if mask is not None:
    x = jnp.where(jnp.broadcast_to(mask, jnp.shape(x)[:-1])[..., None], x, 0.0)
  return res / jnp.sqrt(jnp.sum(x**2, axis=(-2, -1)))
