r"""Common-random-number estimator of :math:`\rho_i` and entropy over eigen-(mean, scale).

Shapes: C = covariances, D = W_QK draws, N = sequences, E = sequences used
for the attention entropy (the first E of the N), T = tokens, d = token
dimension, P = (mean, scale) grid points. Tokens are rows.

The Fig. 5 procedure (Sec. 5, "Numerical simulation") estimates, per
eigen-(mean, scale), the signal propagation probability :math:`\rho_i` of
Definition 1 and the attention entropy, averaging over D draws of
:math:`W_{QK} = B\,\mathrm{diag}(w)B^\top`, :math:`w \sim \mathcal
N(\mathrm{mean}, \mathrm{scale}^2 I)`, B Haar, and over N random walks
(Assumption 1). Sampling everything afresh per grid point spends almost all
of its time drawing random numbers and forming :math:`X W_{QK} X^\top`.

Design (common random numbers). Draw once, and share across every grid
point and covariance,

* per draw index k: a Haar basis :math:`B_k` and :math:`z_k \sim \mathcal
  N(0, I_d)`, so that :math:`W_{QK}(\mathrm{mean}, \mathrm{scale}, k) =
  B_k\,\mathrm{diag}(\mathrm{mean} + \mathrm{scale}\,z_k)\,B_k^\top
  = \mathrm{mean}\,I + \mathrm{scale}\,Z_k`, :math:`Z_k = B_k
  \mathrm{diag}(z_k) B_k^\top` (`draw_spectra`; the same key gives the same
  matrix as `spectrum.sample_qk`);
* one set of N walks :math:`S` (identity covariance); covariance c uses
  :math:`X = S\,\Sigma_c^{1/2}`, which has the law of Assumption 1, and is
  shared by all D draws ("we sampled 300 sequences with 40 tokens"). For
  :math:`\Sigma = cI` draw k uses the rotated walks :math:`X B_k^\top`
  instead (again exactly Assumption 1, the law being rotation invariant), so
  its logits :math:`X\,\mathrm{diag}(w)X^\top` need no d x d product;
  the pairs (walk, draw) keep their joint law and the crossed structure
  below is unchanged.

The logits are then linear in (mean, scale):

.. math:: \omega_{tj} = \mathrm{mean}\,\frac{x_t^\top x_j}{\lambda}
        + \mathrm{scale}\,\frac{x_t^\top Z_k x_j}{\lambda}
        = \mathrm{mean}\,g_{tj} + \mathrm{scale}\,h^{(k)}_{tj},

so two "base" vectors per (draw, sequence) (the last query's row, for
:math:`\rho_i`) or two T x T base matrices (all queries, for the entropy)
are computed once (`query_bases`, `attention_bases`), and each grid point is
an affine combination of them followed by the event :math:`u_i \in [0,1]`
(`softmax.propagation_mask`) or a softmax entropy (`rho_grid`,
`entropy_grid`). The traces of Lemma 1 are quadratic in (mean, scale)
(`trace_coefficients`, `spectrum_traces`).

Statistics. Every pair (X_n, W_k) has exactly the joint law of the paper's
procedure, so each grid point's estimate :math:`\hat\rho_i = (DN)^{-1}
\sum_{k,n} f_{kn}`, :math:`f_{kn} = \mathbb 1\{u_i(X_n, W_k) \in [0,1]\}`,
is unbiased. What changes is the correlation: the D x N table is a crossed
design (walks reused across draws), so the between-draw spread alone
understates the error. With :math:`f = \rho + \alpha_k + \beta_n +
\epsilon_{kn}`, :math:`V\hat\rho = \sigma_\alpha^2/D + \sigma_\beta^2/N +
\sigma_\epsilon^2/(DN)`; `crossed_standard_error` returns
:math:`\sqrt{s^2_{\text{draws}}/D + s^2_{\text{walks}}/N}` (sample variances
of the D per-draw means and of the N per-walk means), whose square has
expectation :math:`V\hat\rho + \sigma_\epsilon^2/(DN)`: slightly
conservative in expectation (over 200 seeds in tests/sweep_fast_test.py the
spread of the estimates is 0.9-1.1x the mean reported SE). (The paper's fresh-walks design has :math:`V = \sigma_\alpha^2/D
+ (\sigma_\beta^2 + \sigma_\epsilon^2)/(DN)`; the price of sharing walks is
the :math:`\sigma_\beta^2/N` term, reported, not hidden.) Across grid points
the errors are positively correlated, which makes heat maps smooth but is
irrelevant to each point's estimate.

References:
  Bao, Hataya, Karakida, Self-attention Networks Localize When
  QK-eigenspectrum Concentrates, arXiv:2402.02098 (Definition 1, Sec. 5,
  Fig. 5).
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec import _checks
from qkspec import randomwalk
from qkspec import spectrum

_SPECTRA_STREAM, _WALK_STREAM = 0, 1     # fold_in tags of `sample_bases`' key


def draw_spectra(key: jax.Array, num_draws: int,
                 dim: int) -> tuple[jax.Array, jax.Array]:
  r"""D common spectra: Haar bases and standard-normal eigenvalue noise.

  Draw k uses `jax.random.fold_in(key, k)` split as in `spectrum.sample_qk`,
  so `qk_matrix(basis[k], z[k], mean, scale)` equals
  `spectrum.sample_qk(fold_in(key, k), dim, mean, scale)` for every
  (mean, scale).

  Returns:
    basis_Dxdxd (orthogonal) and z_Dxd (i.i.d. N(0, 1)).
  """
  num_draws = _checks.positive_int("num_draws", num_draws)
  d = _checks.positive_int("dim", dim)

  def one(k):
    key_b, key_w = jax.random.split(jax.random.fold_in(key, k))
    return (spectrum.haar_orthogonal(key_b, d),
            jax.random.normal(key_w, (d,)))

  return jax.vmap(one)(jnp.arange(num_draws))


def qk_matrix(basis_dxd: jax.Array, z_d: jax.Array, mean: jax.Array,
              scale: jax.Array) -> jax.Array:
  r""":math:`W_{QK} = B\,\mathrm{diag}(\mathrm{mean} + \mathrm{scale}\,z)B^\top` (Fig. 5)."""
  w_d = mean + scale * z_d
  return (basis_dxd * w_d[None, :]) @ basis_dxd.T


def _matmul_rows(x_xd: jax.Array, m_dxe: jax.Array) -> jax.Array:
  """x @ m as one flat GEMM over every leading axis (faster on XLA:CPU)."""
  flat = x_xd.reshape(-1, x_xd.shape[-1]) @ m_dxe
  return flat.reshape(x_xd.shape[:-1] + m_dxe.shape[-1:])


def _weighted_gram(y_ExTxd: jax.Array, w_d: jax.Array,
                   temperature: float) -> jax.Array:
  """(y diag(w) y^T) / temperature per leading index, [E, T, T]."""
  gram = jax.lax.dot_general(y_ExTxd * w_d[None, None, :], y_ExTxd,
                             (((2,), (2,)), ((0,), (0,))))
  return gram / temperature


def _last_query(x_NxTxd, v_Nxd, temperature):
  return jnp.einsum("nd,ntd->nt", v_Nxd, x_NxTxd) / temperature


def query_bases(x_NxTxd: jax.Array, basis_dxd: jax.Array, z_d: jax.Array,
                temperature: float) -> tuple[jax.Array, jax.Array]:
  r"""Last-query bases: :math:`\omega_j = \mathrm{mean}\,a_j + \mathrm{scale}\,b_j`.

  .. math:: a_j = x_T^\top x_j/\lambda,\qquad
            b_j = (B^\top x_T)^\top \mathrm{diag}(z) (B^\top x_j)/\lambda,

  so `mean * a + scale * b` equals `propagation.query_logits(x,
  qk_matrix(basis, z, mean, scale), temperature)` (Definition 1).

  Returns:
    a_NxT, b_NxT.
  """
  _checks.min_ndim("x", x_NxTxd, 3, "[N, T, d]")
  last_Nxd = x_NxTxd[:, -1, :]
  return (_last_query(x_NxTxd, last_Nxd, temperature),
          _last_query(x_NxTxd, _z_apply(last_Nxd, basis_dxd, z_d),
                      temperature))


def _z_apply(v_Nxd, basis_dxd, z_d):
  """v Z = v B diag(z) B^T (Z symmetric)."""
  return ((v_Nxd @ basis_dxd) * z_d[None, :]) @ basis_dxd.T


def attention_bases(x_ExTxd: jax.Array, basis_dxd: jax.Array, z_d: jax.Array,
                    temperature: float) -> tuple[jax.Array, jax.Array]:
  r"""All-query bases: :math:`X W_{QK} X^\top/\lambda = \mathrm{mean}\,g + \mathrm{scale}\,h`.

  .. math:: g = X X^\top/\lambda,\qquad
            h = (XB)\,\mathrm{diag}(z)\,(XB)^\top/\lambda.

  Returns:
    g_ExTxT, h_ExTxT (query axis -2, key axis -1).
  """
  _checks.min_ndim("x", x_ExTxd, 3, "[E, T, d]")
  ones_d = jnp.ones(x_ExTxd.shape[-1], x_ExTxd.dtype)
  return (_weighted_gram(x_ExTxd, ones_d, temperature),
          _weighted_gram(_matmul_rows(x_ExTxd, basis_dxd), z_d, temperature))


def trace_coefficients(basis_dxd: jax.Array, z_d: jax.Array,
                       cov_dxd: jax.Array) -> dict[str, jax.Array]:
  r"""Traces making tr(W), tr(W^2) of :math:`W = W_{QK}\Sigma` quadratic in (mean, scale).

  With :math:`W_{QK} = \mathrm{mean}\,I + \mathrm{scale}\,Z`, :math:`Z =
  B\,\mathrm{diag}(z)B^\top`: :math:`\mathrm{tr}\,W = \mathrm{mean}\,
  \mathrm{tr}\,\Sigma + \mathrm{scale}\,\mathrm{tr}(Z\Sigma)` and
  :math:`\mathrm{tr}\,W^2 = \mathrm{mean}^2\mathrm{tr}\,\Sigma^2 +
  2\,\mathrm{mean}\,\mathrm{scale}\,\mathrm{tr}(Z\Sigma^2) +
  \mathrm{scale}^2\mathrm{tr}(Z\Sigma Z\Sigma)`.
  """
  zc = (basis_dxd * z_d[None, :]) @ (basis_dxd.T @ cov_dxd)   # Z Sigma
  return dict(cov=jnp.trace(cov_dxd),
              cov2=jnp.einsum("ij,ji->", cov_dxd, cov_dxd),
              zc=jnp.trace(zc),
              zc2=jnp.einsum("ij,ji->", zc, cov_dxd),
              zczc=jnp.einsum("ij,ji->", zc, zc))


def spectrum_traces(coefficients: dict[str, jax.Array], mean: jax.Array,
                    scale: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(tr W, tr W^2) at (mean, scale) from `trace_coefficients` (broadcasting)."""
  c = coefficients
  trace = mean * c["cov"] + scale * c["zc"]
  trace_sq = (mean**2 * c["cov2"] + 2 * mean * scale * c["zc2"]
              + scale**2 * c["zczc"])
  return trace, jnp.maximum(trace_sq, 0.0)   # >= 0 up to round-off


def sample_bases(key: jax.Array, covs_Cxdxd: jax.Array, *, num_draws: int,
                 num_sequences: int, entropy_sequences: int, seq_len: int,
                 temperature: float) -> dict[str, jax.Array]:
  """Draws the common random numbers and returns every base, in grid layout.

  Args:
    key: PRNG key; `fold_in(key, 0)` gives the spectra (`draw_spectra`),
      `fold_in(key, 1)` the walks.
    covs_Cxdxd: step covariances of Assumption 1.
    num_draws: D; num_sequences: N; entropy_sequences: E <= N (the first E
      walks also give the entropy); seq_len: T; temperature: lambda.

  Returns:
    A dict: `a` [C, T, N], `b` [D, C, T, N] (`query_bases`, sequences on the
    minor axis for `rho_grid`), `g` [C, E, T, T], `h` [D, C, E, T, T]
    (`attention_bases`), and `trace_coefficients` entries `cov`, `cov2`
    [C] and `zc`, `zc2`, `zczc` [D, C].
  """
  _checks.square_matrix("covs", covs_Cxdxd)
  d = covs_Cxdxd.shape[-1]
  n = _checks.positive_int("num_sequences", num_sequences)
  e = _checks.positive_int("entropy_sequences", entropy_sequences)
  if e > n:
    raise ValueError(f"entropy_sequences ({e}) must be <= num_sequences "
                     f"({n}).")
  basis_Dxdxd, z_Dxd = draw_spectra(jax.random.fold_in(key, _SPECTRA_STREAM),
                                    num_draws, d)
  s_NxTxd = randomwalk.random_walk(jax.random.fold_in(key, _WALK_STREAM), n,
                                   seq_len, d)           # Sigma = I

  def per_cov(cov_dxd):
    # The cumulative sum commutes with the right factor: same law (and, up
    # to round-off, the same numbers) as random_walk(key, ..., cov).
    x_NxTxd = _matmul_rows(s_NxTxd, randomwalk.covariance_sqrt(cov_dxd))
    x_ExTxd = x_NxTxd[:e]
    last_Nxd = x_NxTxd[:, -1, :]

    isotropic = jnp.all(cov_dxd == cov_dxd[0, 0] * jnp.eye(d))

    def per_draw(basis_z):     # the two `*_bases` without their mean parts
      basis_dxd, z_d = basis_z
      # Sigma = c I: draw k sees the rotated walks X B_k^T (again exactly
      # Assumption 1), whose logits X diag(w) X^T need no d x d product.
      basis_dxd = jnp.where(isotropic, jnp.eye(d), basis_dxd)
      y_ExTxd = jax.lax.cond(isotropic, lambda: x_ExTxd,
                             lambda: _matmul_rows(x_ExTxd, basis_dxd))
      b_NxT = _last_query(x_NxTxd, _z_apply(last_Nxd, basis_dxd, z_d),
                          temperature)
      return b_NxT.T, _weighted_gram(y_ExTxd, z_d, temperature)

    b_DxTxN, h_DxExTxT = jax.lax.map(per_draw, (basis_Dxdxd, z_Dxd))
    a_NxT = _last_query(x_NxTxd, last_Nxd, temperature)
    g_ExTxT = _weighted_gram(x_ExTxd, jnp.ones(d), temperature)
    coef = jax.vmap(trace_coefficients, in_axes=(0, 0, None))(
        basis_Dxdxd, z_Dxd, cov_dxd)
    return a_NxT.T, b_DxTxN, g_ExTxT, h_DxExTxT, coef

  a, b, g, h, coef = jax.lax.map(per_cov, covs_Cxdxd)
  return dict(a=a, b=jnp.swapaxes(b, 0, 1), g=g, h=jnp.swapaxes(h, 0, 1),
              cov=coef["cov"][:, 0], cov2=coef["cov2"][:, 0],
              zc=coef["zc"].T, zc2=coef["zc2"].T, zczc=coef["zczc"].T)


def _centred(x, axis):
  return x - jnp.mean(x, axis=axis, keepdims=True)


def rho_grid(a_CxTxN: jax.Array, b_DxCxTxN: jax.Array, means_P: jax.Array,
             scales_P: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""Per-draw :math:`\hat\rho_i` at each grid point, and per-walk sums of squares.

  The event of Definition 1, :math:`u_i = (\omega_i - \bar\omega)/T + 1/T
  \in [0, 1]` (`softmax.propagation_mask`) for :math:`\omega = \mathrm{mean}
  \,a + \mathrm{scale}\,b`. The bases are centred over i once, since
  :math:`\omega - \bar\omega = \mathrm{mean}(a - \bar a) +
  \mathrm{scale}(b - \bar b)`; equal to the mask of the direct logits up to
  float round-off (tests/sweep_fast_test.py). Any leading axes (C) of `a`
  carry through; one grid point at a time (`lax.map`), draws by `lax.scan`,
  keeping every reduction on the minor (sequence) axis, which XLA's CPU
  backend vectorises.

  Args:
    a_CxTxN, b_DxCxTxN: `query_bases`, sequences on the minor axis.
    means_P, scales_P: the grid points.

  Returns:
    rho_PxDxCxT (mean over the N walks per draw) and sq_PxCxT
    (:math:`\sum_n (\sum_k f_{kn})^2`, for `crossed_standard_error`).
  """
  t = a_CxTxN.shape[-2]
  a = _centred(a_CxTxN, -2)
  b = _centred(b_DxCxTxN, -2)

  def point(mean_scale):
    mean, scale = mean_scale[0], mean_scale[1]

    def draw(acc, b_CxTxN):
      u = (mean * a + scale * b_CxTxN) / t + 1.0 / t       # u_i, Sec. 2
      f = ((u >= 0.0) & (u <= 1.0)).astype(jnp.float32)   # Definition 1
      return acc + f, jnp.mean(f, axis=-1)

    acc, rho_DxCxT = jax.lax.scan(draw, jnp.zeros_like(a), b)
    return rho_DxCxT, jnp.sum(acc * acc, axis=-1)

  return jax.lax.map(point, jnp.stack([means_P, scales_P], axis=-1))


def row_entropy(logits: jax.Array) -> jax.Array:
  r"""Softmax-row entropy :math:`\log Z - \sum_j p_j s_j`, :math:`s = \omega - \max\omega`.

  Equals `diagnostics.attention_entropy(softmax(logits), reduce=False)` (one
  exp per entry, no log of small probabilities).
  """
  s = logits - jnp.max(logits, axis=-1, keepdims=True)
  e = jnp.exp(s)
  z = jnp.sum(e, axis=-1)
  return jnp.log(z) - jnp.sum(e * s, axis=-1) / z


def entropy_grid(g_CxExTxT: jax.Array, h_DxCxExTxT: jax.Array,
                 means_P: jax.Array,
                 scales_P: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""Per-draw attention entropy at each grid point (all T queries, Eq. (1)).

  Logits :math:`\mathrm{mean}\,g + \mathrm{scale}\,h` (`attention_bases`);
  entropy of each softmax row, averaged over queries and the E walks, as
  `diagnostics.attention_entropy` (bidirectional, no mask).

  Returns:
    entropy_PxDxC and sq_PxC (:math:`\sum_n (\sum_k f_{kn})^2` with
    :math:`f_{kn}` the walk's mean over queries).
  """
  def point(mean_scale):
    # All draws in one fused computation (the per-walk means are small, so
    # their sum over draws, a major-axis reduction, is cheap here).
    logits = mean_scale[0] * g_CxExTxT[None] + mean_scale[1] * h_DxCxExTxT
    per_walk_DxCxE = jnp.mean(row_entropy(logits), axis=-1)
    return (jnp.mean(per_walk_DxCxE, axis=-1),
            jnp.sum(jnp.sum(per_walk_DxCxE, axis=0)**2, axis=-1))

  return jax.lax.map(point, jnp.stack([means_P, scales_P], axis=-1))


def crossed_standard_error(per_draw: jax.Array, sq: jax.Array,
                           num_sequences: int, axis: int = 0) -> jax.Array:
  r"""Standard error of the grand mean of a D x N crossed table (see module doc).

  .. math:: \widehat{SE}^2 = s^2_{\text{draws}}/D + s^2_{\text{walks}}/N,

  :math:`s^2_{\text{draws}}` the sample variance of the D per-draw means
  (`per_draw` along `axis`), :math:`s^2_{\text{walks}} = (\sum_n c_n^2 -
  N\bar f^2)/(N-1)` of the N per-walk means :math:`c_n = \sum_k f_{kn}/D`
  (:math:`\sum_n (D c_n)^2` = `sq`). Slightly conservative; NaN for D = 1 or
  N = 1.
  """
  d = per_draw.shape[axis]
  n = num_sequences
  grand = jnp.mean(per_draw, axis=axis)
  var_draws = jnp.var(per_draw, axis=axis, ddof=1) if d > 1 else jnp.nan
  var_walks = ((sq / d**2 - n * grand**2) / (n - 1) if n > 1 else jnp.nan)
  return jnp.sqrt(jnp.maximum(var_draws / d + var_walks / n, 0.0))


def grid_stats(bases: dict[str, jax.Array], means_P: jax.Array,
               scales_P: jax.Array) -> dict[str, jax.Array]:
  """Every estimate at P grid points from `sample_bases`' output.

  Returns:
    A dict: `rho` [P, D, C, T] (per draw), `rho_mean`, `rho_se` [P, C, T],
    `entropy` [P, D, C], `entropy_mean`, `entropy_se` [P, C], and `trace`,
    `trace_sq` [P, D, C] (tr W, tr W^2 of :math:`W = W_{QK}\\Sigma`).
  """
  n, e = bases["a"].shape[-1], bases["g"].shape[-3]
  rho, rho_sq = rho_grid(bases["a"], bases["b"], means_P, scales_P)
  ent, ent_sq = entropy_grid(bases["g"], bases["h"], means_P, scales_P)
  coef = {k: bases[k][None, None, :] for k in ("cov", "cov2")}     # [1,1,C]
  coef.update({k: bases[k][None] for k in ("zc", "zc2", "zczc")})  # [1,D,C]
  trace, trace_sq = spectrum_traces(coef, means_P[:, None, None],
                                    scales_P[:, None, None])
  return dict(rho=rho, rho_mean=jnp.mean(rho, axis=1),
              rho_se=crossed_standard_error(rho, rho_sq, n, axis=1),
              entropy=ent, entropy_mean=jnp.mean(ent, axis=1),
              entropy_se=crossed_standard_error(ent, ent_sq, e, axis=1),
              trace=trace, trace_sq=trace_sq)
