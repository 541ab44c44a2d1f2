r"""Monte Carlo :math:`\rho_i` and entropy over (eigen_mean, eigen_std): Fig. 5.

Shapes: C = covariances, P = (eigen_mean, eigen_std) pairs, D = W_QK draws
per pair, N = sequences, T = tokens, d = token dimension.

Per covariance, pair and draw, :math:`W_{QK}` from `spectrum.sample_qk`, N
random walks (Assumption 1), then :math:`\rho_i` of the last query
(Definition 1), the entropy of :math:`\mathrm{softmax}(XW_{QK}X^\top/
\lambda)` (Eq. (1)) and Lemma 1's Gaussian :math:`\rho_i` (printed,
corrected, exact). `config.design` "shared" (default): common random
numbers (`grid_estimator`), with the crossed design's standard errors;
"fresh": the paper read literally, new W_QK and walks per draw.
configs/simulate_rho.py lists the regimes its pairs probe.
"""
# pylint: disable=invalid-name
import functools

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import grid_bases
from qkspec.theory import grid_estimator
from qkspec.theory import propagation
from qkspec.theory import randomwalk
from qkspec.theory import softmax
from qkspec.theory import spectrum
from qkspec.experiments import inputs
from qkspec.experiments import outputs
from qkspec.plots import style

# name -> (exact, variant) of propagation.rho_gaussian.
GAUSSIAN = {"paper": (False, "paper"), "corrected": (False, "corrected"),
            "exact": (True, "corrected")}


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of a simulate_rho config."""
  outputs.require_ints(config, {"dim": 1, "seq_len": 2, "num_sequences": 1,
                                "num_draws": 1, "cells_per_batch": 1})
  outputs.require_temperature(config)
  outputs.require(len(config.pairs) > 0
                  and all(len(p) == 2 and p[1] >= 0 for p in config.pairs),
                  "pairs", "must be a non-empty sequence of (eigen_mean, "
                  "eigen_std >= 0)", config.pairs)
  outputs.require(len(config.regimes) == len(config.pairs), "regimes",
                  f"must have one label per pair ({len(config.pairs)})",
                  config.regimes)
  inputs.require_covariances(config)
  outputs.require_in(config, "design", ("shared", "fresh"))
  outputs.require(isinstance(config.entropy_sequences, int)
                  and 0 <= config.entropy_sequences <= config.num_sequences,
                  "entropy_sequences", "must be an integer in [0, "
                  "num_sequences] (0: all)", config.entropy_sequences)


def draw_key(seed_key: jax.Array, cov: jax.Array, pair: jax.Array,
             draw: jax.Array) -> jax.Array:
  """The key of draw `draw` of pair `pair` under covariance `cov`."""
  key = jax.random.fold_in(seed_key, inputs.DRAW_STREAM)
  return jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(
      key, cov), pair), draw)


def _gaussian(seq_len, trace, trace_sq, lam):
  """Lemma 1's Gaussian rho, {"rho_paper", "rho_corrected", "rho_exact"}."""
  return {f"rho_{name}": propagation.rho_gaussian(
      seq_len, trace, trace_sq, lam, exact=exact, variant=variant)
          for name, (exact, variant) in GAUSSIAN.items()}


def simulate_draw(key, eigen_mean, eigen_std, cov_dxd, *, dim, num_sequences,
                  seq_len, temperature):
  """One W_QK draw: MC rho, attention entropy and Gaussian rho, as a dict."""
  key_w, key_x = jax.random.split(key)
  lam = temperature
  w_dxd = spectrum.sample_qk(key_w, dim, eigen_mean, eigen_std)
  x_NxTxd = randomwalk.random_walk(key_x, num_sequences, seq_len, dim,
                                   cov_dxd)
  omega_NxT = propagation.query_logits(x_NxTxd, w_dxd, lam)  # Definition 1
  logits_NxTxT = jnp.einsum("nte,nse->nts", x_NxTxd @ w_dxd, x_NxTxd) / lam
  probs_NxTxT = softmax.softmax(logits_NxTxT, axis=-1)       # Eq. (1)
  stats = spectrum.spectrum_stats(w_dxd, cov_dxd, lam)
  return dict(rho=propagation.empirical_rho(omega_NxT),
              entropy=diagnostics.attention_entropy(probs_NxTxT),
              r=stats["r"], xi=stats["xi"], eta=stats["eta"],
              **_gaussian(seq_len, stats["trace"], stats["trace_sq"], lam))


@functools.partial(jax.jit, static_argnames=(
    "dim", "num_sequences", "seq_len", "num_draws", "cells_per_batch",
    "temperature"))
def sweep(seed_key, means_P, stds_P, covs_Cxdxd, *, dim, num_sequences,
          seq_len, num_draws, cells_per_batch, temperature):
  """The Fig. 5 sweep, fresh design, `cells_per_batch` (covariance, pair)
  cells at a time; outputs [C, P, D]."""
  num_c, num_p = covs_Cxdxd.shape[0], means_P.shape[0]
  c_idx, p_idx = (a.ravel() for a in jnp.meshgrid(
      jnp.arange(num_c), jnp.arange(num_p), indexing="ij"))
  draws = jnp.arange(num_draws)
  one_draw = functools.partial(simulate_draw, dim=dim,
                               num_sequences=num_sequences, seq_len=seq_len,
                               temperature=temperature)

  def cell(args):
    c, p = args
    keys_D = jax.vmap(lambda k: draw_key(seed_key, c, p, k))(draws)
    return jax.vmap(one_draw, in_axes=(0, None, None, None))(
        keys_D, means_P[p], stds_P[p], covs_Cxdxd[c])

  out = jax.lax.map(cell, (c_idx, p_idx), batch_size=cells_per_batch)
  return jax.tree.map(
      lambda a: a.reshape((num_c, num_p) + a.shape[1:]), out)


@functools.partial(jax.jit, static_argnames=(
    "num_sequences", "entropy_sequences", "seq_len", "num_draws",
    "temperature"))
def sweep_shared(seed_key, means_P, stds_P, covs_Cxdxd, *, num_sequences,
                 entropy_sequences, seq_len, num_draws, temperature):
  """The Fig. 5 sweep, shared design; outputs as `sweep` plus `*_se`."""
  lam = temperature
  bases = grid_bases.sample_bases(
      inputs.shared_key(seed_key), covs_Cxdxd,
      num_draws=num_draws, num_sequences=num_sequences,
      entropy_sequences=entropy_sequences, seq_len=seq_len, temperature=lam)
  stats = grid_estimator.grid_stats(bases, means_P, stds_P)
  trace, trace_sq = stats["trace"], stats["trace_sq"]            # [P, D, C]
  root = jnp.sqrt(trace_sq)
  out = dict(rho=stats["rho"], entropy=stats["entropy"], r=trace / lam,
             xi=trace / root, eta=root / lam,
             **_gaussian(seq_len, trace, trace_sq, lam))
  out = {k: jnp.moveaxis(v, 2, 0) for k, v in out.items()}       # [C, P, D]
  out["rho_se"] = jnp.moveaxis(stats["rho_se"], 1, 0)             # [C, P, T]
  out["entropy_se"] = stats["entropy_se"].T                       # [C, P]
  return out


def sweep_from_config(config: ml_collections.ConfigDict) -> dict:
  """Runs `config.design`'s sweep: numpy [C, P, D, ...], with the standard
  errors `rho_se` [C, P, T] and `entropy_se` [C, P]."""
  means, stds = (jnp.asarray(v, jnp.float32) for v in zip(*config.pairs))
  key, covs = jax.random.key(config.seed), inputs.covariances(config)
  lam = softmax.temperature(config.temperature, config.dim)
  if config.design == "shared":
    out = sweep_shared(
        key, means, stds, covs, num_sequences=config.num_sequences,
        entropy_sequences=config.entropy_sequences or config.num_sequences,
        seq_len=config.seq_len, num_draws=config.num_draws, temperature=lam)
    return jax.tree.map(np.asarray, out)
  out = sweep(key, means, stds, covs,
              dim=config.dim, num_sequences=config.num_sequences,
              seq_len=config.seq_len, num_draws=config.num_draws,
              cells_per_batch=config.cells_per_batch, temperature=lam)
  out = jax.tree.map(np.asarray, out)
  root_d = np.sqrt(config.num_draws)
  with np.errstate(invalid="ignore", divide="ignore"):   # D = 1: NaN
    out["rho_se"] = out["rho"].std(2, ddof=1) / root_d
    out["entropy_se"] = out["entropy"].std(2, ddof=1) / root_d
  return out


def tables(out: dict, config: ml_collections.ConfigDict):
  """Per-position rows, per-pair rows and per-covariance error rows."""
  t = config.seq_len
  rho_mean, rho_std = out["rho"].mean(2), out["rho"].std(2)      # [C, P, T]
  gauss = {n: out[f"rho_{n}"].mean(2) for n in GAUSSIAN}         # [C, P, T]
  err = {n: np.abs(g - rho_mean) for n, g in gauss.items()}
  positions, pairs, errors = [], [], []
  for c, cov in enumerate(config.covariances):
    for p, ((eigen_mean, eigen_std), regime) in enumerate(
        zip(config.pairs, config.regimes)):
      base = dict(covariance=cov, pair=p, eigen_mean=eigen_mean,
                  eigen_std=eigen_std, regime=regime)
      for i in range(t):
        positions.append(dict(
            base, i=i + 1, theta=(i + 1) / t, rho_mc=rho_mean[c, p, i],
            rho_mc_std=rho_std[c, p, i],
            **{f"rho_{n}": g[c, p, i] for n, g in gauss.items()}))
      pairs.append(dict(
          base, **{k: float(out[k][c, p].mean()) for k in ("r", "xi", "eta")},
          entropy=float(out["entropy"][c, p].mean()),
          entropy_std=float(out["entropy"][c, p].std()),
          entropy_se=float(out["entropy_se"][c, p]),
          rho_mc_se_max=float(out["rho_se"][c, p].max()),
          rho_mc_max=float(rho_mean[c, p].max()),
          rho_mc_mean=float(rho_mean[c, p].mean()),
          **{f"max_err_{n}": float(e[c, p].max()) for n, e in err.items()}))
    errors.append(dict(
        covariance=cov,
        **{f"max_abs_err_{n}": float(e[c].max()) for n, e in err.items()},
        **{f"mean_abs_err_{n}": float(e[c].mean()) for n, e in err.items()}))
  return positions, pairs, errors


def plot_fig5(out, config, workdir):
  """Fig. 5: rho_i per pair (thin: draws, bold: mean) and entropy per pair."""
  num_c, num_p = out["rho"].shape[:2]
  colors = style.colors("tab10", np.arange(num_p) % 10)
  i_T = np.arange(1, config.seq_len + 1)
  fig, axes = style.subplots(num_c, 2, (13, 3.8 * num_c),
                             gridspec_kw=dict(width_ratios=(1.6, 1)))
  for c, cov in enumerate(config.covariances):
    ax, ax_ent = axes[c]
    for p, ((m, s), regime) in enumerate(zip(config.pairs, config.regimes)):
      ax.plot(i_T, out["rho"][c, p].T, color=colors[p], lw=0.5, alpha=0.35)
      ax.plot(i_T, out["rho"][c, p].mean(0), color=colors[p], lw=2.2,
              label=f"eigen_mean={m:g}, eigen_std={s:g} ({regime})")
    ax.set(xlabel="token position i", ylabel=r"$\rho_i$",
           ylim=(-0.03, 1.03),
           title=f"{cov} $\\Sigma$: $\\rho_i$ ({config.num_draws} "
                 f"$W_{{QK}}$ draws, {config.num_sequences} walks)")
    ent = out["entropy"][c]                                      # [P, D]
    ax_ent.bar(np.arange(num_p), ent.mean(1), yerr=ent.std(1), color=colors)
    ax_ent.axhline(np.log(config.seq_len), ls="--", color="k", lw=1,
                   label=r"$\ln T$ (uniform attention)")
    ax_ent.set_xticks(np.arange(num_p),
                      [f"({m:g}, {s:g})" for m, s in config.pairs],
                      rotation=45, ha="right", fontsize=8)
    ax_ent.set(xlabel="(eigen_mean, eigen_std)",
               ylabel="attention entropy [nats]",
               title=f"{cov} $\\Sigma$: entropy of "
                     r"softmax$(XWX^\top/\lambda)$")
    ax_ent.legend(fontsize=8)
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=8)
  fig.suptitle("Simulated signal propagation probability (cf. paper Fig. 5)")
  return [style.save_figure(fig, workdir, "fig5_simulation")]


def plot_gaussian(out, config, workdir):
  """MC rho_i (mean +- std over draws) vs the three Gaussian approximations."""
  num_c, num_p = out["rho"].shape[:2]
  i_T = np.arange(1, config.seq_len + 1)
  fig, axes = style.subplots(num_c, num_p, (2.6 * num_p, 2.7 * num_c + 0.6),
                             sharex=True, sharey=True)
  styles = {"paper": ("tab:red", "--"), "corrected": ("tab:blue", "-"),
            "exact": ("tab:green", ":")}
  for c, cov in enumerate(config.covariances):
    for p in range(num_p):
      ax = axes[c][p]
      mc, sd = out["rho"][c, p].mean(0), out["rho"][c, p].std(0)
      ax.fill_between(i_T, mc - sd, mc + sd, color="0.8")
      ax.plot(i_T, mc, "k.", ms=3, label="Monte Carlo")
      for name, (color, ls) in styles.items():
        ax.plot(i_T, out[f"rho_{name}"][c, p].mean(0), color=color, ls=ls,
                lw=1.3, label=f"Gaussian ({name})")
      eigen_mean, eigen_std = config.pairs[p]
      ax.set_title(f"{cov[:5]}: eigen_mean={eigen_mean:g},\n"
                   f"eigen_std={eigen_std:g}", fontsize=10)
      ax.set_ylim(-0.03, 1.03)
    axes[c][0].set_ylabel(r"$\rho_i$")
  for ax in axes[-1]:
    ax.set_xlabel("token position i")
  handles, labels = axes[0][0].get_legend_handles_labels()
  fig.legend(handles, labels, loc="outside lower center", ncol=4,
             fontsize=10)
  fig.suptitle(r"Monte Carlo $\rho_i$ (mean $\pm$ std over draws) vs "
               "Lemma 1 Gaussian approximation "
               "(printed / corrected / exact finite-T moments)")
  return [style.save_figure(fig, workdir, "fig5_gaussian_vs_mc")]


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Runs the Fig. 5 sweep and writes figures, tables and config.json."""
  workdir, paths = outputs.start_run(config, workdir, validate)
  with outputs.heartbeat("simulate_rho (compiling and sweeping)"):
    out = sweep_from_config(config)
  positions, pairs, errors = tables(out, config)
  logging.info("Per pair:\n%s", outputs.format_table(pairs, (
      "covariance", "eigen_mean", "eigen_std", "regime", "r", "xi", "eta",
      "entropy", "entropy_se", "rho_mc_max", "rho_mc_se_max", "rho_mc_mean",
      "max_err_paper", "max_err_corrected", "max_err_exact")))
  logging.info("Gaussian approximation vs Monte Carlo, |mean over draws| "
               "error over pairs and positions:\n%s",
               outputs.format_table(errors))
  paths += plot_fig5(out, config, workdir)
  paths += plot_gaussian(out, config, workdir)
  paths += outputs.write_tables(dict(simulate_rho=positions,
                                    simulate_pairs=pairs,
                                    simulate_errors=errors), workdir)
  outputs.log_outputs("simulate_rho", paths)
  return dict(out=out, positions=positions, pairs=pairs, errors=errors,
              paths=paths)
