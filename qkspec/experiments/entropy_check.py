r"""Measured attention entropy against Eq. (9) and Zhai et al.'s Theorem 3.1.

Shapes: I = input kinds, P = W_QK settings (Gaussian norms, then sample_qk
pairs), D = draws, N = sequences, T = tokens, d = dim.

Every row of :math:`A = \mathrm{softmax}(XW_{QK}X^\top/\lambda)` is compared
with Eq. (9) and Zhai's bound (`measures.entropy_curves`) and with Zhai's
bound at the row's own centred logit norm (the sharpest); a row violates a
curve when below it by more than `measures.BOUND_TOL` nats.
"""
# pylint: disable=invalid-name
import functools

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import entropy_bounds
from qkspec.theory import san
from qkspec.theory import softmax
from qkspec.theory import spectrum
from qkspec.experiments import measures
from qkspec.experiments import outputs
from qkspec.plots import style

BOUNDS = ("eq9", "eq9_raw", "zhai", "zhai_raw", "zhai_row")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of an entropy_check
  config."""
  outputs.require_ints(config, {"dim": 1, "seq_len": 2, "num_sequences": 1,
                                "num_draws": 1})
  outputs.require_temperature(config)
  outputs.require_subset(config, "inputs", san.INPUTS)
  outputs.require(all(n > 0 for n in config.qk_norms), "qk_norms",
                  "must be > 0", config.qk_norms)
  outputs.require(all(len(p) == 2 and p[1] >= 0 for p in config.pairs),
                  "pairs", "must be (eigen_mean, eigen_std >= 0) pairs",
                  config.pairs)
  outputs.require(len(config.qk_norms) + len(config.pairs) > 0, "qk_norms",
                  "and pairs must not both be empty", config.qk_norms)


def settings(config) -> list[dict]:
  """One dict per W_QK setting, Gaussian norms first."""
  nan = float("nan")
  rows = [dict(kind="gaussian", qk_norm=float(n), eigen_mean=nan,
               eigen_std=nan) for n in config.qk_norms]
  rows += [dict(kind="spectrum", qk_norm=nan, eigen_mean=float(m),
                eigen_std=float(s)) for m, s in config.pairs]
  return rows


def row_stats(x_NxTxd, w_qk, lam, seq_len):
  """Per-sequence nu, entropies and the fraction of rows below each bound."""
  logits = jnp.einsum("ntd,de,nje->ntj", x_NxTxd, w_qk, x_NxTxd) / lam
  ent_NxT = diagnostics.attention_entropy(jax.nn.softmax(logits, axis=-1),
                                          reduce=False)
  nu_N = entropy_bounds.entropy_bound_nu(x_NxTxd, w_qk[None], lam)
  curves_N = measures.entropy_curves(nu_N, lam, seq_len)
  bounds = {k: v[:, None] for k, v in curves_N.items()}
  bounds["zhai_row"] = entropy_bounds.zhai_entropy_lower_bound(
      entropy_bounds.centred_logit_norm(logits), seq_len)
  out = dict(nu=nu_N, entropy_mean=ent_NxT.mean(-1),
             entropy_min=ent_NxT.min(-1))
  for name, b in bounds.items():
    out[f"below_{name}"] = jnp.mean(measures.below(ent_NxT, b), axis=-1)
    out[f"slack_{name}"] = jnp.min(ent_NxT - b, axis=-1)
  # The paper's reading: the mean entropy of a sequence vs the curve.
  out["mean_below_eq9"] = measures.below(ent_NxT.mean(-1), curves_N["eq9"])
  return out


@functools.partial(jax.jit, static_argnames=(
    "kind", "dim", "seq_len", "num_sequences", "num_draws", "temperature"))
def sweep_setting(key, p, is_gauss, norm, eigen_mean, eigen_std, *, kind, dim,
                  seq_len, num_sequences, num_draws, temperature):
  """One W_QK setting p for one input kind: arrays [D, N]."""

  def one(draw):
    k_x, k_w = jax.random.split(jax.random.fold_in(key, draw))
    k_w = jax.random.fold_in(k_w, p)
    # Gaussian W_QK with ||W||_2 = norm, or sample_qk(eigen_mean, eigen_std).
    g = jax.random.normal(k_w, (dim, dim))
    w_qk = jnp.where(is_gauss, norm * g / jnp.linalg.norm(g, ord=2),
                     spectrum.sample_qk(k_w, dim, eigen_mean, eigen_std))
    x_NxTxd = san.sample_inputs(k_x, kind, num_sequences, seq_len, dim)
    return row_stats(x_NxTxd, w_qk, temperature, seq_len)

  return jax.vmap(one)(jnp.arange(num_draws))


def sweep_from_config(config) -> dict:
  """Per input kind, arrays [P, D, N], setting by setting (one jit over
  all settings hung on 2-core XLA:CPU)."""
  rows = settings(config)
  key = jax.random.key(config.seed)
  lam = softmax.temperature(config.temperature, config.dim)
  out = {}
  for i, kind in enumerate(config.inputs):
    per_setting = []
    for p, r in enumerate(rows):
      per_setting.append(jax.tree.map(np.asarray, sweep_setting(
          jax.random.fold_in(key, i), p, r["kind"] == "gaussian",
          float(np.nan_to_num(r["qk_norm"])),
          float(np.nan_to_num(r["eigen_mean"])),
          float(np.nan_to_num(r["eigen_std"])), kind=kind, dim=config.dim,
          seq_len=config.seq_len, num_sequences=config.num_sequences,
          num_draws=config.num_draws, temperature=lam)))
    out[kind] = jax.tree.map(lambda *a: np.stack(a), *per_setting)
    logging.info("inputs %s: %d settings done", kind, len(rows))
  return out


def tables(out, config):
  """Per-setting rows and per-(input, bound) summary rows."""
  set_rows, summary = [], []
  log_t = float(np.log(config.seq_len))
  for kind in config.inputs:
    o = out[kind]
    for p, s in enumerate(settings(config)):
      nu_med = np.median(o["nu"][p])
      row = dict(inputs=kind, **s, nu_median=float(nu_med),
                 entropy_mean=float(o["entropy_mean"][p].mean()),
                 entropy_min=float(o["entropy_min"][p].min()),
                 eq9_at_nu_median=float(diagnostics.eq9_entropy(
                     nu_med, config.seq_len)),
                 zhai_at_nu_median=float(
                     entropy_bounds.zhai_entropy_lower_bound(
                         nu_med, config.seq_len)),
                 seq_mean_below_eq9=float(o["mean_below_eq9"][p].mean()))
      for b in BOUNDS:
        row[f"rows_below_{b}"] = float(o[f"below_{b}"][p].mean())
        row[f"min_slack_{b}"] = float(o[f"slack_{b}"][p].min())
      set_rows.append(row)
    nu_all = o["nu"].ravel()
    nu_range = f"[{nu_all.min():.3g}, {nu_all.max():.3g}]"
    for b in (*BOUNDS, "eq9_mean_entropy"):   # last: a sequence's mean entropy
      per_row = b in BOUNDS
      below = o[f"below_{b}" if per_row else "mean_below_eq9"]
      summary.append(dict(
          inputs=kind, bound=b, rows_below_fraction=float(below.mean()),
          settings_with_violations=int(np.sum(below.max(axis=(1, 2)) > 0)),
          num_settings=int(below.shape[0]),
          min_slack=float(o[f"slack_{b}"].min()) if per_row else float("nan"),
          nu_range=nu_range if per_row else f"ln T = {log_t:.3g}"))
  return set_rows, summary


def plot(out, config, workdir):
  """Entropy vs nu per input kind with the Eq. (9) and Zhai curves."""
  kinds = list(config.inputs)
  fig, axes = style.subplots(1, len(kinds), (6.5 * len(kinds), 4.5))
  t = config.seq_len
  for ax, kind in zip(axes[0], kinds):
    o = out[kind]
    num_g = len(config.qk_norms)
    for sl, marker, label in ((slice(0, num_g), "o", "Gaussian W_QK"),
                              (slice(num_g, None), "s", "sample_qk")):
      nu = o["nu"][sl].ravel()
      if nu.size == 0:
        continue
      ax.scatter(nu, o["entropy_mean"][sl].ravel(), s=6, marker=marker,
                 alpha=0.5, label=f"{label}: mean row entropy")
      ax.scatter(nu, o["entropy_min"][sl].ravel(), s=6, marker=marker,
                 alpha=0.5, label=f"{label}: min row entropy")
    lo = max(float(o["nu"].min()) / 2, 1e-4)
    grid = np.geomspace(lo, float(o["nu"].max()) * 2, 400)
    ax.plot(grid, diagnostics.eq9_entropy(grid, t), "k-", lw=1.5,
            label="Eq. (9) curve as printed")
    ax.plot(grid, entropy_bounds.zhai_entropy_lower_bound(grid, t), "r--",
            lw=1.5, label="Zhai Thm 3.1")
    ax.axhline(np.log(t), color="gray", ls=":", label="ln T")
    ax.set(xscale="log", xlabel="nu = ||XX^T||_2 ||W_QK||_2 / lambda",
           ylabel="entropy [nats]", title=f"{kind} inputs, T = {t}, "
           f"d = {config.dim}", ylim=(-0.1, max(np.log(t) * 1.6, 1)))
    ax.legend(fontsize=7)
  return style.save_figure(fig, workdir, "fig_entropy_check")


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Sweeps the settings, writes per-setting rows, a summary and a figure."""
  workdir, paths = outputs.start_run(config, workdir, validate)
  with outputs.heartbeat("entropy_check (compiling and sweeping)"):
    out = sweep_from_config(config)
  set_rows, summary = tables(out, config)
  outputs.show("entropy_check: fraction of attention rows below each curve "
               "(Eq. (9), Zhai's bound)", outputs.format_table(summary))
  paths += outputs.write_tables(dict(entropy_check=set_rows,
                                     entropy_check_summary=summary), workdir)
  paths.append(plot(out, config, workdir))
  outputs.log_outputs("entropy_check", paths)
  return dict(raw=out, settings=set_rows, summary=summary, paths=paths)
