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

so each grid point is an affine combination of "bases" computed once per
(draw, walk), followed by the event :math:`u_i \in [0,1]`
(`softmax.propagation_mask`; `rho_grid`) or a softmax entropy
(`entropy_grid`). The traces of Lemma 1 are quadratic in (mean, scale)
(`trace_coefficients`, `spectrum_traces`).

Evaluation. The walks are kept divided by :math:`\sqrt\lambda`, so every
quadratic form is a logit, and the D draws' :math:`Z_k` act through one
GEMM with :math:`[Z_1 \cdots Z_D]` side by side (`draw_operators`,
`times_z`; an elementwise product for :math:`\Sigma = cI`). :math:`\rho_i`
needs only the last query's row, so its bases (`query_bases`, D T numbers
per walk) are kept for all N walks. The entropy needs all T x T logits;
holding their bases for all E walks (D C E T^2 floats, 38 MB at the Fig. 5
sizes) and sweeping the grid over them re-reads them from memory for every
point. `entropy_grid` instead takes 4 walks at a time, forms their bases
(`attention_bases`: the D draws stacked as T D rows of one product per
walk) and evaluates 4 grid points at a time on them, so that each fused
softmax works on 1 MB, in the L2 cache. As the logit matrix is symmetric
(:math:`W_{QK}` is), the softmax over keys is taken over its first axis,
which XLA:CPU reduces faster than the last. With the prefix-sum walks
(`random_walks`), this takes the jit-compiled Fig. 5 sweep
(bench/simulate.py) from 0.36 s to 0.22 s on one core, and from 0.22 s to
0.16 s on two.

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

from qkspec.theory import _checks
from qkspec.theory import randomwalk
from qkspec.theory import spectrum

_SPECTRA_STREAM, _WALK_STREAM = 0, 1     # fold_in tags of `sample_bases`' key
# entropy_grid's batches: walks whose bases are formed at once, and grid
# points per fused softmax (4 x 4 x T x D x T floats, 1 MB: in L2 cache).
_WALKS_PER_BATCH, _POINTS_PER_BATCH = 4, 4


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


def random_walks(key: jax.Array, num_sequences: int, seq_len: int,
                 dim: int) -> jax.Array:
  """`randomwalk.random_walk(key, num_sequences, seq_len, dim)`, Sigma = I.

  The same increments, summed by a prefix scan (`lax.associative_scan`):
  equal up to float round-off and 2.5x faster on XLA:CPU, where `jnp.cumsum`
  of freshly drawn normals costs twice the draws themselves.
  """
  eps_NxTxd = jax.random.normal(key, (num_sequences, seq_len, dim))
  return jax.lax.associative_scan(jnp.add, eps_NxTxd, axis=1)


def draw_operators(basis_Dxdxd: jax.Array, z_Dxd: jax.Array,
                   isotropic: jax.Array | bool) -> jax.Array:
  r"""The D draws' scale parts :math:`Z_k`, side by side, for one covariance.

  :math:`Z_k = B_k\,\mathrm{diag}(z_k)B_k^\top`, or :math:`\mathrm{diag}(z_k)`
  where `isotropic` (:math:`\Sigma = cI`: draw k then sees the rotated walks
  :math:`XB_k^\top`, see the module doc).

  Returns:
    zcat_dxDd with `zcat[:, k*d:(k+1)*d]` = :math:`Z_k`.
  """
  num_draws, d = z_Dxd.shape
  zmat_Dxdxd = jnp.where(isotropic, jax.vmap(jnp.diag)(z_Dxd),
                         jax.vmap(qk_matrix, (0, 0, None, None))(
                             basis_Dxdxd, z_Dxd, 0.0, 1.0))
  return jnp.moveaxis(zmat_Dxdxd, 0, 1).reshape(d, num_draws * d)


def times_z(v_Xxd: jax.Array, zcat_dxDd: jax.Array,
            diagonal: jax.Array | bool) -> jax.Array:
  """:math:`v Z_k` for every draw k: [..., d] -> [..., D, d].

  One GEMM with `zcat` (`draw_operators`); an elementwise product when
  `diagonal` (the :math:`Z_k` of an isotropic Sigma).
  """
  d = zcat_dxDd.shape[0]
  shape = v_Xxd.shape[:-1] + (zcat_dxDd.shape[1] // d, d)

  def diag():
    z_Dxd = jnp.diagonal(zcat_dxDd.reshape(d, -1, d), axis1=0, axis2=2)
    return v_Xxd[..., None, :] * z_Dxd[(None,) * (v_Xxd.ndim - 1)]

  return jax.lax.cond(diagonal, diag,
                      lambda: _matmul_rows(v_Xxd, zcat_dxDd).reshape(shape))


def query_bases(x_NxTxd: jax.Array,
                zlast_NxDxd: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""Last-query bases: :math:`\omega_j = \mathrm{mean}\,a_j + \mathrm{scale}\,b^{(k)}_j`.

  .. math:: a_j = x_T^\top x_j,\qquad b^{(k)}_j = x_T^\top Z_k x_j,

  for walks x already divided by :math:`\sqrt\lambda` and `zlast` =
  `times_z(x[:, -1], ...)`, so that `mean * a + scale * b[k]` is the
  transpose of `propagation.query_logits` of :math:`\sqrt\lambda x` and
  `qk_matrix(basis_k, z_k, mean, scale)` (Definition 1).

  Returns:
    a_TxN, b_DxTxN (sequences on the minor axis, for `rho_grid`).
  """
  _checks.min_ndim("x", x_NxTxd, 3, "[N, T, d]")
  return (jnp.einsum("nd,ntd->tn", x_NxTxd[:, -1, :], x_NxTxd),
          jnp.einsum("nkd,ntd->ktn", zlast_NxDxd, x_NxTxd))


def attention_bases(x_XxTxd: jax.Array,
                    zx_XxTxDxd: jax.Array) -> tuple[jax.Array, jax.Array]:
  r"""All-query bases: :math:`X W_{QK} X^\top/\lambda = \mathrm{mean}\,g + \mathrm{scale}\,h^{(k)}`.

  .. math:: g = X X^\top,\qquad h^{(k)} = (X Z_k) X^\top,

  for walks X already divided by :math:`\sqrt\lambda` (any leading axes)
  and `zx` = `times_z(x, ...)`. h is one batched product per walk, the D
  draws stacked as (T D) rows.

  Returns:
    g_XxTxT, h_XxTxDxT (query axis first, key axis last).
  """
  return (jnp.einsum("...td,...sd->...ts", x_XxTxd, x_XxTxd),
          jnp.einsum("...tkd,...sd->...tks", zx_XxTxDxd, x_XxTxd))


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
  """Draws the common random numbers and returns what `grid_stats` needs.

  Args:
    key: PRNG key; `fold_in(key, 0)` gives the spectra (`draw_spectra`),
      `fold_in(key, 1)` the walks.
    covs_Cxdxd: step covariances of Assumption 1.
    num_draws: D; num_sequences: N; entropy_sequences: E <= N (the first E
      walks also give the entropy); seq_len: T; temperature: lambda.

  Returns:
    A dict: `a` [C, T, N], `b` [D, C, T, N] (`query_bases`); for the
    entropy, `x` [C, E, T, d] (the first E walks under each covariance,
    divided by sqrt(lambda)), `zcat` [C, d, D d] (`draw_operators`) and
    `isotropic` [C]; and `trace_coefficients` entries `cov`, `cov2` [C] and
    `zc`, `zc2`, `zczc` [D, C].
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
  s_NxTxd = random_walks(jax.random.fold_in(key, _WALK_STREAM), n, seq_len,
                         d)                                  # Sigma = I

  a, b, x, zcat, isotropic, coef = [], [], [], [], [], []
  for cov_dxd in covs_Cxdxd:
    iso = jnp.all(cov_dxd == cov_dxd[0, 0] * jnp.eye(d))
    zcat_dxDd = draw_operators(basis_Dxdxd, z_Dxd, iso)
    # X = S Sigma^(1/2): the cumulative sum commutes with the right factor,
    # so X has the law (and, up to round-off, the numbers) of
    # random_walk(key, ..., cov). Divided by sqrt(lambda), every quadratic
    # form below is a logit.
    x_NxTxd = jax.lax.cond(
        iso, lambda c=cov_dxd: s_NxTxd * jnp.sqrt(c[0, 0] / temperature),
        lambda c=cov_dxd: _matmul_rows(
            s_NxTxd, randomwalk.covariance_sqrt(c) / temperature**0.5))
    a_TxN, b_DxTxN = query_bases(
        x_NxTxd, times_z(x_NxTxd[:, -1, :], zcat_dxDd, iso))
    a.append(a_TxN)
    b.append(b_DxTxN)
    x.append(x_NxTxd[:e])
    zcat.append(zcat_dxDd)
    isotropic.append(iso)
    coef.append(jax.vmap(trace_coefficients, in_axes=(0, 0, None))(
        basis_Dxdxd, z_Dxd, cov_dxd))
  coef = {k: jnp.stack([c[k] for c in coef], axis=-1) for k in coef[0]}
  return dict(a=jnp.stack(a), b=jnp.stack(b, axis=1), x=jnp.stack(x),
              zcat=jnp.stack(zcat), isotropic=jnp.stack(isotropic),
              cov=coef["cov"][0], cov2=coef["cov2"][0], zc=coef["zc"],
              zc2=coef["zc2"], zczc=coef["zczc"])


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


def row_entropy(logits: jax.Array, axis: int = -1) -> jax.Array:
  r"""Softmax entropy along `axis`: :math:`\log Z - \sum_j p_j s_j`, :math:`s = \omega - \max\omega`.

  Equals `diagnostics.attention_entropy(softmax(logits), reduce=False)` (one
  exp per entry, no log of small probabilities).
  """
  s = logits - jnp.max(logits, axis=axis, keepdims=True)
  e = jnp.exp(s)
  z = jnp.sum(e, axis=axis)
  return jnp.log(z) - jnp.sum(e * s, axis=axis) / z


def entropy_grid(x_CxExTxd: jax.Array, zcat_CxdxDd: jax.Array,
                 isotropic_C: jax.Array, means_P: jax.Array,
                 scales_P: jax.Array, *,
                 walks_per_batch: int = _WALKS_PER_BATCH,
                 points_per_batch: int = _POINTS_PER_BATCH,
                 ) -> tuple[jax.Array, jax.Array]:
  r"""Per-draw attention entropy at each grid point (all T queries, Eq. (1)).

  Logits :math:`\mathrm{mean}\,g + \mathrm{scale}\,h^{(k)}`
  (`attention_bases`); entropy of each softmax row, averaged over queries
  and the E walks, as `diagnostics.attention_entropy` (bidirectional, no
  mask). Walks are taken `walks_per_batch` at a time: their bases are
  formed and used for every grid point (`points_per_batch` at a time)
  before the next batch, so the bases of all E walks never exist at once.

  Args:
    x_CxExTxd, zcat_CxdxDd, isotropic_C: `sample_bases`' `x`, `zcat` and
      `isotropic`.
    means_P, scales_P: the grid points.
    walks_per_batch, points_per_batch: batch sizes (speed and memory only).

  Returns:
    entropy_PxDxC and sq_PxC (:math:`\sum_n (\sum_k f_{kn})^2` with
    :math:`f_{kn}` the walk's mean over queries).
  """
  zcats = tuple(zcat_CxdxDd)          # sliced once, not in every batch

  def walk(x_per_cov):                # one walk under every covariance
    per_cov = []
    for x_Txd, zcat_dxDd, iso in zip(x_per_cov, zcats, isotropic_C):
      g_TxT, h_TxDxT = attention_bases(x_Txd, times_z(x_Txd, zcat_dxDd, iso))

      def point(mean_scale, g_TxT=g_TxT, h_TxDxT=h_TxDxT):
        mean, scale = mean_scale
        logits = mean * g_TxT[:, None, :] + scale * h_TxDxT
        # The logits are symmetric (so is W_QK): the softmax over keys is
        # taken over the first axis, which XLA:CPU reduces faster.
        return jnp.mean(row_entropy(logits, axis=0), axis=-1)   # [D]

      per_cov.append(jax.lax.map(point, (means_P, scales_P),
                                 batch_size=points_per_batch))
    return jnp.stack(per_cov, axis=-1)                   # [P, D, C]

  per_walk_ExPxDxC = jax.lax.map(walk, tuple(x_CxExTxd),
                                 batch_size=walks_per_batch)
  return (jnp.mean(per_walk_ExPxDxC, axis=0),
          jnp.sum(jnp.sum(per_walk_ExPxDxC, axis=2)**2, axis=0))


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
  n, e = bases["a"].shape[-1], bases["x"].shape[1]
  rho, rho_sq = rho_grid(bases["a"], bases["b"], means_P, scales_P)
  ent, ent_sq = entropy_grid(bases["x"], bases["zcat"], bases["isotropic"],
                             means_P, scales_P)
  coef = {k: bases[k][None, None, :] for k in ("cov", "cov2")}     # [1,1,C]
  coef.update({k: bases[k][None] for k in ("zc", "zc2", "zczc")})  # [1,D,C]
  trace, trace_sq = spectrum_traces(coef, means_P[:, None, None],
                                    scales_P[:, None, None])
  return dict(rho=rho, rho_mean=jnp.mean(rho, axis=1),
              rho_se=crossed_standard_error(rho, rho_sq, n, axis=1),
              entropy=ent, entropy_mean=jnp.mean(ent, axis=1),
              entropy_se=crossed_standard_error(ent, ent_sq, e, axis=1),
              trace=trace, trace_sq=trace_sq)
