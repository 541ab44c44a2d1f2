r"""Common-random-number estimator of :math:`\rho_i` and entropy on a grid.

Shapes: C = covariances, K = W_QK draws, N = sequences, E = sequences used
for the entropy (the first E of the N), T = tokens, d = token dimension,
P = (eigen_mean, eigen_std) grid points.

`grid_stats` evaluates each point of Fig. 5's grid on
`grid_bases.sample_bases` (bench/simulate.py times it against the paper's
procedure). Each :math:`\hat\rho_i = (KN)^{-1}\sum_{k,n} f_{kn}` is
unbiased, but the K x N table is a crossed design, :math:`V\hat\rho =
\sigma_\alpha^2/K + \sigma_\beta^2/N + \sigma_\epsilon^2/(KN)`, so the
between-draw spread alone understates the error
(`crossed_standard_error`; tests/theory/grid_estimator_test.py).
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.theory import grid_bases

# entropy_grid's batches: walks whose bases are formed at once, and grid
# points per fused softmax (4 x 4 x T x K x T floats, 1 MB: in L2 cache).
_WALKS_PER_BATCH, _POINTS_PER_BATCH = 4, 4


def spectrum_traces(coefficients: dict[str, jax.Array], eigen_mean: jax.Array,
                    eigen_std: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""(tr W, tr W^2) of :math:`W = W_{QK}\Sigma` at (eigen_mean, eigen_std),
  from `grid_bases.trace_coefficients` broadcasting with the point(s)."""
  c, mean, std = coefficients, eigen_mean, eigen_std
  trace = mean * c["cov"] + std * c["zc"]
  trace_sq = (mean**2 * c["cov2"] + 2 * mean * std * c["zc2"]
              + std**2 * c["zczc"])
  return trace, jnp.maximum(trace_sq, 0.0)   # >= 0 up to round-off


def _centred(x, axis):
  return x - jnp.mean(x, axis=axis, keepdims=True)


def rho_per_draw(a_CxTxN: jax.Array, b_KxCxTxN: jax.Array, means_P: jax.Array,
                 stds_P: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""Per-draw :math:`\hat\rho_i` at each grid point, per-walk sums of squares.

  Definition 1's event :math:`u_i \in [0, 1]` for :math:`\omega = \mu_w a
  + \sigma_w b` on `grid_bases.query_bases`, centred over i once.

  Returns:
    rho_PxKxCxT (mean over the N walks per draw) and sq_PxCxT
    (:math:`\sum_n (\sum_k f_{kn})^2`, for `crossed_standard_error`).
  """
  t = a_CxTxN.shape[-2]
  a = _centred(a_CxTxN, -2)
  b = _centred(b_KxCxTxN, -2)

  def point(mean_std):
    mean, std = mean_std[0], mean_std[1]

    def draw(acc, b_CxTxN):
      u = (mean * a + std * b_CxTxN) / t + 1.0 / t         # u_i, Sec. 2
      f = ((u >= 0.0) & (u <= 1.0)).astype(jnp.float32)   # Definition 1
      return acc + f, jnp.mean(f, axis=-1)

    acc, rho_KxCxT = jax.lax.scan(draw, jnp.zeros_like(a), b)
    return rho_KxCxT, jnp.sum(acc * acc, axis=-1)

  return jax.lax.map(point, jnp.stack([means_P, stds_P], axis=-1))


def row_entropy(logits: jax.Array, axis: int = -1) -> jax.Array:
  r"""Softmax entropy along `axis`, :math:`\log Z - \sum_j p_j s_j` with
  :math:`s = \omega - \max\omega` (one exp per entry, no log of p)."""
  s = logits - jnp.max(logits, axis=axis, keepdims=True)
  e = jnp.exp(s)
  z = jnp.sum(e, axis=axis)
  return jnp.log(z) - jnp.sum(e * s, axis=axis) / z


def entropy_grid(x_CxExTxd: jax.Array, zcat_CxdxKd: jax.Array,
                 isotropic_C: jax.Array, means_P: jax.Array,
                 stds_P: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""Per-draw attention entropy at each grid point (all T queries, Eq. (1)).

  Logits :math:`\mu_w g + \sigma_w h^{(k)}` (`grid_bases.attention_bases`),
  row entropies averaged over queries and walks. A batch of walks' bases is
  formed and used for every point (a few at a time) before the next, so
  each fused softmax stays in the L2 cache.

  Returns:
    entropy_PxKxC and sq_PxC (:math:`\sum_n (\sum_k f_{kn})^2` with
    :math:`f_{kn}` the walk's mean over queries).
  """
  zcats = tuple(zcat_CxdxKd)          # sliced once, not in every batch

  def walk(x_per_cov):                # one walk under every covariance
    per_cov = []
    for x_Txd, zcat_dxKd, iso in zip(x_per_cov, zcats, isotropic_C):
      g_TxT, h_TxKxT = grid_bases.attention_bases(
          x_Txd, grid_bases.times_z(x_Txd, zcat_dxKd, iso))

      def point(mean_std, g_TxT=g_TxT, h_TxKxT=h_TxKxT):
        mean, std = mean_std
        logits = mean * g_TxT[:, None, :] + std * h_TxKxT
        # symmetric logits: the softmax over keys runs along the first
        # axis, which XLA:CPU reduces faster
        return jnp.mean(row_entropy(logits, axis=0), axis=-1)   # [K]

      per_cov.append(jax.lax.map(point, (means_P, stds_P),
                                 batch_size=_POINTS_PER_BATCH))
    return jnp.stack(per_cov, axis=-1)                   # [P, K, C]

  per_walk_ExPxKxC = jax.lax.map(walk, tuple(x_CxExTxd),
                                 batch_size=_WALKS_PER_BATCH)
  return (jnp.mean(per_walk_ExPxKxC, axis=0),
          jnp.sum(jnp.sum(per_walk_ExPxKxC, axis=2)**2, axis=0))


def crossed_standard_error(per_draw: jax.Array, sq: jax.Array,
                           num_sequences: int, axis: int = 0) -> jax.Array:
  r"""Standard error of the grand mean of a K x N crossed table (module doc).

  .. math:: \widehat{SE}^2 = s^2_{\text{draws}}/K + s^2_{\text{walks}}/N,

  the sample variances of the K per-draw means (`per_draw` along `axis`)
  and of the N per-walk means :math:`c_n` (`sq` = :math:`\sum_n (K
  c_n)^2`). NaN for K = 1 or N = 1.
  """
  k = per_draw.shape[axis]
  n = num_sequences
  grand = jnp.mean(per_draw, axis=axis)
  var_draws = jnp.var(per_draw, axis=axis, ddof=1) if k > 1 else jnp.nan
  var_walks = ((sq / k**2 - n * grand**2) / (n - 1) if n > 1 else jnp.nan)
  return jnp.sqrt(jnp.maximum(var_draws / k + var_walks / n, 0.0))


def grid_stats(bases: dict[str, jax.Array], means_P: jax.Array,
               stds_P: jax.Array) -> dict[str, jax.Array]:
  r"""Every estimate at P grid points from `grid_bases.sample_bases`.

  Returns:
    A dict: `rho` [P, K, C, T] (per draw), `rho_mean`, `rho_se` [P, C, T],
    `entropy` [P, K, C], `entropy_mean`, `entropy_se` [P, C], and `trace`,
    `trace_sq` [P, K, C] (tr W, tr W^2 of :math:`W = W_{QK}\Sigma`).
  """
  n, e = bases["a"].shape[-1], bases["x"].shape[1]
  rho, rho_sq = rho_per_draw(bases["a"], bases["b"], means_P, stds_P)
  ent, ent_sq = entropy_grid(bases["x"], bases["zcat"], bases["isotropic"],
                             means_P, stds_P)
  coef = {k: bases[k][None, None, :] for k in ("cov", "cov2")}     # [1,1,C]
  coef.update({k: bases[k][None] for k in ("zc", "zc2", "zczc")})  # [1,K,C]
  trace, trace_sq = spectrum_traces(coef, means_P[:, None, None],
                                    stds_P[:, None, None])
  return dict(rho=rho, rho_mean=jnp.mean(rho, axis=1),
              rho_se=crossed_standard_error(rho, rho_sq, n, axis=1),
              entropy=ent, entropy_mean=jnp.mean(ent, axis=1),
              entropy_se=crossed_standard_error(ent, ent_sq, e, axis=1),
              trace=trace, trace_sq=trace_sq)
