r"""Signal propagation probability :math:`\rho_i` (Def. 1, Lemmas 1-2, Eq. 6).

Shapes: N = sequences, T = tokens, d = token dimension; tokens are rows.

The query is the last token: :math:`\omega_j = x_T^\top W_{QK} x_j/\lambda`,
and Definition 1's event is :math:`u_i = (\omega_i - \bar\omega)/T + 1/T
\in [0, 1]`.

Erratum in Lemma 1: Appendix C's term (B2) drops a sum :math:`2\sum_{j>i}
T i`; keeping it, with :math:`\theta = i/T`, the printed variance
:math:`(2\theta^2 + 7/12)\,\mathrm{tr}(W^2)/\lambda^2` becomes
:math:`(2\theta^2 - 2\theta + 7/12)\,\mathrm{tr}(W^2)/\lambda^2`
(tests/theory/propagation_test.py checks it against Monte Carlo).

Exact finite-T moments: :math:`u_i - 1/T` is a Gaussian quadratic form;
with :math:`a = (e_i - \mathbf 1/T)/T`, :math:`G_{jk} = \min(j, k)`,
:math:`g = (1, \dots, T)`:

.. math::
   E u_i &= \tfrac1T + (a^\top g)\,\mathrm{tr}(M\Sigma)/\lambda, \\
   V u_i &= \big[(a^\top g)^2\,\mathrm{tr}((M\Sigma)^2)
           + T\,(a^\top G a)\,\mathrm{tr}(M\Sigma M^\top\Sigma)\big]/\lambda^2.

At finite T (near :math:`\mathrm{tr}W = 0` both asymptotic forms miss
Monte Carlo by ~0.1 at T = 40) use `exact=True`. `temperature=None` means
:math:`\sqrt d` where W_QK or tokens are seen.
"""
import jax
import jax.numpy as jnp
from jax.scipy.special import erf

from qkspec.theory import _checks
from qkspec.theory import randomwalk
from qkspec.theory import softmax
from qkspec.theory import spectrum

VARIANTS = ("corrected", "paper")


def query_logits(x: jax.Array, w_qk: jax.Array,
                 temperature: float | None = None) -> jax.Array:
  r"""Last-token logits :math:`\omega_j = x_T^\top W_{QK} x_j/\lambda` (Def. 1).

  x [..., T, d], `w_qk` [d, d] or [..., d, d]; returns omega [..., T].
  """
  x, w_qk = jnp.asarray(x), jnp.asarray(w_qk)
  _checks.min_ndim("x", x, 2, "[..., T, d]")
  _checks.square_matrix("w_qk", w_qk, x.shape[-1])
  lam = softmax.temperature(temperature, x.shape[-1])
  query_d = jnp.einsum("...d,...de->...e", x[..., -1, :], w_qk)
  return jnp.einsum("...e,...te->...t", query_d, x) / lam


def rho_monte_carlo(key: jax.Array, w_qk: jax.Array, *, num_sequences: int,
                    seq_len: int, cov: jax.Array | None = None,
                    temperature: float | None = None) -> jax.Array:
  r"""Monte Carlo :math:`\rho_i` (Definition 1) of [d, d] `w_qk`: rho [T].

  The frequency of :math:`u_i \in [0, 1]` over N random walks of T >= 2
  tokens (Assumption 1, step covariance `cov`, None = I); standard error
  :math:`\sqrt{\rho_i(1-\rho_i)/N}`.
  """
  w_qk = jnp.asarray(w_qk)
  t = _checks.positive_int("seq_len", seq_len, minimum=2)
  x_NxTxd = randomwalk.random_walk(key, num_sequences, t, w_qk.shape[-1], cov)
  return empirical_rho(query_logits(x_NxTxd, w_qk, temperature))


def empirical_rho(logits: jax.Array, axis: int = -1,
                  mask: jax.Array | None = None) -> jax.Array:
  r"""Frequency of :math:`u_i \in [0,1]` over every axis but `axis` (Fig. 7).

  `logits`: query logits, keys along `axis`. `mask` (broadcast to
  `logits`): the keys each query sees; then :math:`u_i` is over a query's
  visible keys (`softmax.linearized_score`) and :math:`\rho_i` the
  frequency over the queries that see key i, NaN where none does. Returns
  rho [T] float32.
  """
  _checks.seq_axis_length("logits", logits, axis)
  event = jnp.moveaxis(softmax.propagation_mask(logits, axis=axis, mask=mask),
                       axis, -1)
  event = event.reshape(-1, event.shape[-1]).astype(jnp.float32)
  if mask is None:
    return jnp.mean(event, axis=0)
  seen = jnp.moveaxis(jnp.broadcast_to(mask, jnp.shape(logits)), axis, -1)
  count = jnp.sum(seen.reshape(event.shape), axis=0)
  return jnp.where(count > 0, jnp.sum(event, axis=0) / jnp.maximum(count, 1),
                   jnp.nan)


def _positions(seq_len):
  t = _checks.positive_int("seq_len", seq_len, minimum=2)
  return t, jnp.arange(1, t + 1, dtype=jnp.float32)


def _exact_coefficients(seq_len):
  """(1/T, a^T g, T a^T G a) per position i (module docstring)."""
  t, i = _positions(seq_len)
  a_g = (i - (t + 1) / 2) / t
  sum_min_i = i * t - i * (i - 1) / 2                  # sum_j min(i, j)
  mean_min = (t + 1) * (2 * t + 1) / (6 * t)           # sum_jk min(j,k) / T^2
  t_a_g_a = (i - 2 * sum_min_i / t + mean_min) / t     # T * a^T G a
  return 1.0 / t, a_g, t_a_g_a


def _asymptotic_variance_coefficient(theta, variant):
  _checks.choice("variant", variant, VARIANTS)
  if variant == "paper":
    return 2 * theta**2 + 7 / 12                       # Lemma 1 as printed
  return 2 * theta**2 - 2 * theta + 7 / 12             # re-derived, see above


def lemma1_moments(seq_len: int, trace: jax.Array, trace_sq: jax.Array,
                   temperature: jax.Array | None = None, exact: bool = False,
                   variant: str = "corrected") -> tuple[jax.Array, jax.Array]:
  r"""Mean and variance of :math:`u_i` (Lemma 1), i = 1..T.

  Asymptotic (`exact=False`), :math:`\theta = i/T`:

  .. math:: \mu^i = (\theta - \tfrac12)\,\mathrm{tr}(W)/\lambda,\quad
            v^i = c(\theta)\,\mathrm{tr}(W^2)/\lambda^2,

  :math:`c(\theta) = 2\theta^2 + 7/12` for `variant="paper"` (as printed),
  :math:`2\theta^2 - 2\theta + 7/12` for "corrected" (module erratum).
  `exact=True` (only "corrected"): the exact finite-T moments for symmetric
  :math:`W_{QK}` (`exact_moments` for asymmetric ones). `trace` tr(W) and
  `trace_sq` tr(W^2) are scalars or [...]; `temperature` is required.
  Returns (mu [..., T], v [..., T]).
  """
  _checks.nonnegative("trace_sq", trace_sq)
  temperature = softmax.temperature(temperature, None)
  outer = jnp.multiply.outer      # [...] x [T] -> [..., T]
  trace, trace_sq = trace / temperature, trace_sq / temperature**2
  if exact:
    if variant != "corrected":
      raise ValueError(f"exact=True has no variant {variant!r}.")
    inv_t, a_g, t_a_g_a = _exact_coefficients(seq_len)
    return inv_t + outer(trace, a_g), outer(trace_sq, a_g**2 + t_a_g_a)
  t, i = _positions(seq_len)
  theta = i / t
  return (outer(trace, theta - 0.5),
          outer(trace_sq, _asymptotic_variance_coefficient(theta, variant)))


def exact_moments(w_qk: jax.Array, seq_len: int, cov: jax.Array | None = None,
                  temperature: float | None = None
                  ) -> tuple[jax.Array, jax.Array]:
  r"""Exact mean and variance of :math:`u_i`, (mu [T], v [T]) (module doc),
  for one [d, d] `w_qk`, symmetric or not, and step covariance `cov`."""
  w_qk = jnp.asarray(w_qk)
  _checks.square_matrix("w_qk", w_qk)
  if w_qk.ndim != 2:
    raise ValueError(f"w_qk must be one [d, d] matrix (vmap over a batch), "
                     f"got shape {w_qk.shape}.")
  d = w_qk.shape[-1]
  lam = softmax.temperature(temperature, d)
  m_sigma, mt_sigma = w_qk, w_qk.T
  if cov is not None:
    _checks.square_matrix("cov", cov, d)
    m_sigma, mt_sigma = w_qk @ jnp.asarray(cov), w_qk.T @ jnp.asarray(cov)
  tr1 = jnp.trace(m_sigma) / lam
  tr2 = jnp.einsum("ij,ji->", m_sigma, m_sigma) / lam**2
  tr_cross = jnp.einsum("ij,ji->", m_sigma, mt_sigma) / lam**2
  inv_t, a_g, t_a_g_a = _exact_coefficients(seq_len)
  return inv_t + a_g * tr1, a_g**2 * tr2 + t_a_g_a * tr_cross


def rho_from_moments(mu: jax.Array, v: jax.Array) -> jax.Array:
  r"""Gaussian approximation :math:`P\{u \in [0,1]\}`, :math:`u \sim N(\mu, v)`.

  .. math:: \rho = \tfrac12\Big[\mathrm{erf}\frac{1-\mu}{\sqrt{2v}}
                  + \mathrm{erf}\frac{\mu}{\sqrt{2v}}\Big]

  (Sec. 4), broadcasting `mu` and `v` >= 0; v = 0 gives the indicator of
  :math:`\mu \in [0, 1]`.
  """
  root = jnp.sqrt(2 * jnp.where(v > 0, v, 1.0))
  gauss = 0.5 * (erf((1 - mu) / root) + erf(mu / root))
  point = ((mu >= 0) & (mu <= 1)).astype(gauss.dtype)
  return jnp.where(v > 0, gauss, point)


def rho_gaussian(seq_len: int, trace: jax.Array, trace_sq: jax.Array,
                 temperature: jax.Array | None = None, exact: bool = False,
                 variant: str = "corrected") -> jax.Array:
  r"""`rho_from_moments(*lemma1_moments(...))`: rho [..., T] (Sec. 4)."""
  mu, v = lemma1_moments(seq_len, trace, trace_sq, temperature, exact=exact,
                         variant=variant)
  return rho_from_moments(mu, v)


def rho_theta(theta: jax.Array, xi: jax.Array, eta: jax.Array,
              variant: str = "corrected") -> jax.Array:
  r"""The continuous signal propagation probability, Eq. (6).

  .. math:: \rho(\theta) = \Phi((\theta-\tfrac12)\xi;\theta)
                         - \Phi((\theta-\tfrac12)\xi - 1/\eta;\theta),\quad
            \Phi(z;\theta) = \tfrac12\,\mathrm{erf}\frac{z}{\sqrt{2c(\theta)}},

  with :math:`c(\theta)` of `lemma1_moments`' `variant`,
  :math:`\xi = \mathrm{tr}W/\sqrt{\mathrm{tr}W^2}`, :math:`\eta =
  \sqrt{\mathrm{tr}W^2}/\lambda`. Errata: Fig. 2's caption has
  :math:`\lambda^2` in :math:`\eta` (the derivation gives :math:`\lambda`);
  Fig. 3's :math:`\xi = 512, \xi\eta = 5.12` needs :math:`\eta = 0.01`,
  not the 0.02 of its text.

  `theta` in [0, 1], real `xi`, `eta` > 0 (`inf` allowed), broadcast.
  """
  _checks.unit_interval("theta", theta)
  _checks.positive("eta", eta)
  theta = jnp.asarray(theta, dtype=jnp.float32)
  root = jnp.sqrt(2 * _asymptotic_variance_coefficient(theta, variant))
  z = (theta - 0.5) * xi
  return 0.5 * (erf(z / root) - erf((z - 1.0 / eta) / root))


def rho_trace_limit(theta: jax.Array, r: float) -> jax.Array:
  r"""Lemma 2 (1-2): the limit of :math:`\rho(\theta)` as |xi| -> infinity.

  With :math:`\eta \to 0`, :math:`\xi\eta \to r` (either variant):

  .. math:: \rho \to \mathbb 1\{\tfrac12 \le \theta \le \tfrac12 + \tfrac1r\}
            \;(r > 0),\qquad
            \mathbb 1\{\tfrac12 + \tfrac1r \le \theta \le \tfrac12\}\;(r < 0).

  `r` = :math:`\mathrm{tr}(W)/\lambda`, a nonzero Python float; float32,
  the shape of `theta`.
  """
  if r == 0:
    raise ValueError("r = 0 has no sharp limit (Lemma 2 needs r != 0).")
  low, high = sorted((0.5, 0.5 + 1.0 / r))
  theta = jnp.asarray(theta, dtype=jnp.float32)
  return ((theta >= low) & (theta <= high)).astype(jnp.float32)


def rho_from_spectrum(w_qk: jax.Array, seq_len: int,
                      cov: jax.Array | None = None,
                      temperature: float | None = None, exact: bool = False,
                      variant: str = "corrected") -> jax.Array:
  r"""`rho_gaussian` on the traces of [..., d, d] `w_qk`'s symmetric part
  times `cov` (None = I): rho [..., T]."""
  w_qk = jnp.asarray(w_qk)
  stats = spectrum.spectrum_stats(w_qk, cov, temperature)
  lam = softmax.temperature(temperature, w_qk.shape[-1])
  return rho_gaussian(seq_len, stats["trace"], stats["trace_sq"], lam,
                      exact=exact, variant=variant)
