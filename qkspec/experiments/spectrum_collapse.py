r"""Rank collapse, entropy and :math:`\rho` of deep pure SANs by W_QK spectrum.

Shapes: M = eigen-means, S = eigen-stds, G = M*S grid points, D = draws,
N = sequences, L = layers, H = heads, T = tokens, d = token dimension.

Paper Sec. 5 (A2): a larger :math:`|\mathrm{tr}\,W|` (eigen_mean) at fixed
:math:`\mathrm{tr}(W^2)` slows rank collapse (Eq. 7, Dong's Theorem 2.2);
a smaller :math:`\mathrm{tr}(W^2)` (eigen_std) raises the entropy (Eqs.
9-10). Each layer gets its own `spectrum.sample_qk(eigen_mean,
eigen_std)`; per layer we measure :math:`r_l`, the entropy,
:math:`\rho_i` of the last query and the rows below Eq. (9) or Zhai's
bound (`measures`).
"""
# pylint: disable=invalid-name
import functools

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import entropy_bounds
from qkspec.theory import propagation
from qkspec.theory import san
from qkspec.theory import softmax
from qkspec.experiments import chunked
from qkspec.experiments import measures
from qkspec.experiments import outputs
from qkspec.plots import style

_LOG_FLOOR = 1e-30
# The config fields that set `measure_draw`'s shapes and options.
_STATIC = ("dim", "seq_len", "num_layers", "num_heads", "num_sequences",
           "inputs", "value_init")


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of the config."""
  outputs.require_ints(config, {
      "dim": 1, "seq_len": 2, "num_layers": 1, "num_heads": 1, "num_draws": 1,
      "num_sequences": 1, "points_per_batch": 1})
  outputs.require_temperature(config)
  outputs.require(len(config.eigen_means) > 0, "eigen_means",
                  "must be non-empty", config.eigen_means)
  outputs.require(len(config.eigen_stds) > 0
                  and all(s >= 0 for s in config.eigen_stds), "eigen_stds",
                  "must be non-empty and >= 0", config.eigen_stds)
  outputs.require_in(config, "inputs", san.INPUTS)
  outputs.require_in(config, "value_init", san.VALUE_INITS)
  outputs.require(0 < config.collapse_threshold < 1, "collapse_threshold",
                  "must be in (0, 1)", config.collapse_threshold)


def measure_draw(key, eigen_mean, eigen_std, *, dim, seq_len, num_layers,
                 num_heads, num_sequences, inputs, value_init, temperature):
  """One weight draw at one grid point: per-layer summaries as a dict."""
  k_w, k_x = jax.random.split(key)
  lam = temperature
  params = san.init_params(k_w, num_layers=num_layers, num_heads=num_heads,
                           dim=dim, qk_init="spectrum", eigen_mean=eigen_mean,
                           eigen_std=eigen_std, value_init=value_init)
  x_NxTxd = san.sample_inputs(k_x, inputs, num_sequences, seq_len, dim)
  run = jax.vmap(lambda x: san.forward(params, x, temperature=lam))(x_NxTxd)
  xs_NxKxTxd, logits_NxLxHxTxT = run["outputs"], run["logits"]
  rel_NxK = diagnostics.relative_residual(xs_NxKxTxd, "mean")
  ent_NxLxHxT = diagnostics.attention_entropy(run["probs"], reduce=False)
  # Definition 1 for the last query, per layer: samples = sequences x heads.
  last_LxNxHxT = jnp.moveaxis(logits_NxLxHxTxT[..., -1, :], 1, 0)
  rho_LxT = jax.vmap(propagation.empirical_rho)(last_LxNxHxT)
  # Eq. (9) and Zhai at nu = ||X X^T||_2 ||W_QK||_2 / lambda (and lambda = 1).
  nu_NxLxH = entropy_bounds.entropy_bound_nu(
      xs_NxKxTxd[:, :-1, None], params["w_qk"][None], lam)
  curves = {k: v[..., None] for k, v in measures.entropy_curves(
      nu_NxLxH, lam, seq_len).items()}                      # [N, L, H, 1]
  below = lambda b: jnp.mean(measures.below(ent_NxLxHxT, b),  # noqa: E731
                             axis=(0, 2, 3))
  return dict(
      log_rel_res=jnp.mean(jnp.log(jnp.maximum(rel_NxK, _LOG_FLOOR)), axis=0),
      entropy=jnp.mean(ent_NxLxHxT, axis=(0, 2, 3)),
      entropy_min=jnp.min(ent_NxLxHxT, axis=(0, 2, 3)),
      rho=rho_LxT,
      log_nu=jnp.mean(jnp.log(nu_NxLxH), axis=(0, 2)),
      eq9_violation=below(curves["eq9"]),
      eq9_raw_violation=below(curves["eq9_raw"]),
      zhai_violation=below(curves["zhai"]),
      zhai_min_slack=jnp.min(ent_NxLxHxT - curves["zhai"], axis=(0, 2, 3)),
      qk_norm_2=jnp.mean(jnp.linalg.norm(params["w_qk"], ord=2,
                                         axis=(-2, -1))),
  )


@functools.partial(jax.jit,
                   static_argnames=_STATIC + ("num_draws", "temperature"))
def sweep(seed_key, index_G, means_G, stds_G, *, num_draws, **static):
  """A chunk of grid points, `index_G` their PRNG streams; outputs
  [G, D, ...]."""
  one_draw = functools.partial(measure_draw, **static)

  def point(g, eigen_mean, eigen_std):
    keys_D = jax.vmap(lambda k: jax.random.fold_in(
        jax.random.fold_in(seed_key, g), k))(jnp.arange(num_draws))
    return jax.vmap(one_draw, in_axes=(0, None, None))(keys_D, eigen_mean,
                                                       eigen_std)

  return jax.vmap(point)(index_G, means_G, stds_G)


def sweep_from_config(config) -> dict:
  """Runs `sweep` chunk by chunk; numpy arrays [M, S, D, ...]."""
  means_G, stds_G = (a.ravel() for a in np.meshgrid(    # eigen_std fastest
      np.asarray(config.eigen_means, np.float32),
      np.asarray(config.eigen_stds, np.float32), indexing="ij"))
  fn = functools.partial(
      sweep, jax.random.key(config.seed), num_draws=config.num_draws,
      temperature=softmax.temperature(config.temperature, config.dim),
      **{k: config[k] for k in _STATIC})
  out = chunked.map_chunks(fn, (np.arange(len(means_G)), means_G, stds_G),
                           config.points_per_batch, "spectrum_collapse")
  shape = (len(config.eigen_means), len(config.eigen_stds))
  return jax.tree.map(lambda a: a.reshape(shape + a.shape[1:]), out)


def collapse_summary(log_r_K: np.ndarray, threshold: float) -> dict:
  """Collapse depth (`measures.collapse_depth`) and the mean decrease of
  log10 r per layer up to it."""
  log10_r = np.asarray(log_r_K) / np.log(10.0)
  depth = measures.collapse_depth(log10_r, np.log10(threshold))
  end = min(depth, len(log10_r) - 1)
  rate = (log10_r[0] - log10_r[end]) / max(end, 1)
  return dict(collapse_depth=depth, log10_decay_per_layer=float(rate))


_PER_LAYER = ("log_nu", "rho", "eq9_violation", "zhai_violation")


def tables(out, config):
  """Grid rows, per-layer rows, rho rows and the claim checks."""
  grid_rows, layer_rows, rho_rows = [], [], []
  num_layers = config.num_layers
  probe = sorted({1, min(4, num_layers), num_layers})
  # E tr(W)/lambda = eigen_mean d / lambda (Sigma = I).
  r_per_mean = config.dim / float(softmax.temperature(config.temperature,
                                                      config.dim))
  for i, mean in enumerate(config.eigen_means):
    for j, std in enumerate(config.eigen_stds):
      point = dict(eigen_mean=float(mean), eigen_std=float(std))
      log_r_K = out["log_rel_res"][i, j].mean(0)
      ent_L = out["entropy"][i, j].mean(0)
      summary = collapse_summary(log_r_K, config.collapse_threshold)
      grid_rows.append(dict(
          point,
          r_trace=float(mean) * r_per_mean,
          qk_norm_2=float(out["qk_norm_2"][i, j].mean()),
          **summary,
          **{f"log10_rel_res_l{l}": float(log_r_K[l] / np.log(10))
             for l in probe},
          entropy_l1=float(ent_L[0]), entropy_mean=float(ent_L.mean()),
          entropy_min_row_l1=float(out["entropy_min"][i, j, :, 0].min()),
          rho_mean_l1=float(out["rho"][i, j, :, 0].mean()),
          rho_max_l1=float(out["rho"][i, j, :, 0].mean(0).max()),
          eq9_violation_l1=float(out["eq9_violation"][i, j, :, 0].mean()),
          eq9_violation_all=float(out["eq9_violation"][i, j].mean()),
          eq9_raw_violation_all=float(out["eq9_raw_violation"][i, j].mean()),
          zhai_violation_all=float(out["zhai_violation"][i, j].mean()),
          zhai_min_slack=float(out["zhai_min_slack"][i, j].min())))
      for l in range(num_layers + 1):
        row = dict(point, layer=l,
                   log10_rel_res=float(log_r_K[l] / np.log(10)))
        if l < num_layers:   # attention of layer l+1 (from X^l)
          v = {k: out[k][i, j, :, l].mean() for k in _PER_LAYER}
          row.update(entropy=float(ent_L[l]),
                     log10_nu=float(v["log_nu"] / np.log(10)),
                     rho_mean=float(v["rho"]),
                     eq9_violation=float(v["eq9_violation"]),
                     zhai_violation=float(v["zhai_violation"]))
        else:
          row.update(dict.fromkeys(("entropy", "log10_nu", "rho_mean",
                                    "eq9_violation", "zhai_violation"),
                                   float("nan")))
        layer_rows.append(row)
      rho_TL = out["rho"][i, j].mean(0)                      # [L, T]
      for l in sorted({0, min(1, num_layers - 1), num_layers - 1}):
        for t in range(config.seq_len):
          rho_rows.append(dict(point, layer=l + 1, i=t + 1,
                               rho=float(rho_TL[l, t])))
  return grid_rows, layer_rows, rho_rows


_TREND_RTOL = 0.03   # steps smaller than 3% of the larger value are ties


def claims(grid_rows, config) -> list[dict]:
  """The two A2 claims, checked step by step along the grid."""
  by = {(r["eigen_mean"], r["eigen_std"]): r for r in grid_rows}
  means = [float(m) for m in config.eigen_means]
  stds = [float(s) for s in config.eigen_stds]
  rows = []

  def claim(text, fixed, along, values, trend_of):
    """Counts the steps along `trend_of` down (supporting) and up."""
    v = np.asarray(trend_of, np.float64)
    d = np.diff(v)
    big = np.abs(d) > _TREND_RTOL * np.maximum(np.abs(v[1:]), np.abs(v[:-1]))
    up, down = int(np.sum((d > 0) & big)), int(np.sum((d < 0) & big))
    rows.append(dict(claim=text, fixed=fixed, along=along, values=values,
                     steps_supporting=down, steps_against=up,
                     holds=bool(down > 0 and up == 0)))

  by_size = sorted(means, key=abs)
  for s in stds:
    depth = [by[(m, s)]["collapse_depth"] for m in by_size]
    decay = [by[(m, s)]["log10_decay_per_layer"] for m in by_size]
    claim("larger |eigen_mean| at fixed eigen_std slows rank collapse",
          f"eigen_std={s:g}",
          "|eigen_mean|: " + ", ".join(f"{m:g}" for m in by_size),
          "decay/layer: " + ", ".join(f"{v:.3g}" for v in decay)
          + " | depth: " + ", ".join(str(v) for v in depth), decay)
  for m in means:
    ent = [by[(m, s)]["entropy_l1"] for s in stds]
    claim("smaller eigen_std at fixed eigen_mean raises entropy (layer 1)",
          f"eigen_mean={m:g}",
          "eigen_std: " + ", ".join(f"{s:g}" for s in stds),
          "entropy: " + ", ".join(f"{v:.3g}" for v in ent), ent)
  return rows


def plot_grid(grid_rows, config, workdir):
  """Heat maps over (eigen_mean, eigen_std): collapse, entropy, rho."""
  num_m, num_s = len(config.eigen_means), len(config.eigen_stds)
  panels = (("collapse_depth", f"collapse depth (r < "
             f"{config.collapse_threshold:g})"),
            ("log10_decay_per_layer", "log10 decay of r per layer"),
            ("entropy_l1", "entropy, layer 1 [nats]"),
            ("entropy_mean", "entropy, mean over layers"),
            ("rho_mean_l1", "mean rho_i, layer 1"),
            ("eq9_violation_all", "rows below the Eq. (9) curve"))
  fig, axes = style.subplots(2, 3, (15, 8))
  for ax, (key, title) in zip(axes.ravel(), panels):
    v = np.array([r[key] for r in grid_rows], np.float64).reshape(num_m,
                                                                  num_s)
    im = ax.imshow(v, origin="lower", aspect="auto", cmap="viridis")
    for (a, b), value in np.ndenumerate(v):
      ax.text(b, a, f"{value:.3g}", ha="center", va="center", fontsize=7,
              color="w")
    ax.set_xticks(range(num_s), [f"{s:g}" for s in config.eigen_stds])
    ax.set_yticks(range(num_m), [f"{m:g}" for m in config.eigen_means])
    ax.set(xlabel="eigen_std", ylabel="eigen_mean", title=title)
    fig.colorbar(im, ax=ax, shrink=0.8)
  fig.suptitle("Deep pure SAN, W_QK ~ sample_qk(eigen_mean, eigen_std) per "
               f"layer (L={config.num_layers}, d={config.dim}, "
               f"T={config.seq_len}, {config.inputs} inputs, "
               f"ln T = {np.log(config.seq_len):.2f})")
  return style.save_figure(fig, workdir, "fig_spectrum_collapse")


def _mean_colors(config) -> np.ndarray:
  """One colour per eigen_mean, the same in every figure."""
  return style.colors("plasma", np.linspace(0, 0.9,
                                              len(config.eigen_means)))


def plot_layers(out, config, workdir):
  """Per-layer r_l and entropy: a line per eigen_mean, a panel per eigen_std."""
  stds = list(config.eigen_stds)
  fig, axes = style.subplots(2, len(stds), (3.4 * len(stds), 6.5),
                             sharey="row")
  colors = _mean_colors(config)
  l_K = np.arange(config.num_layers + 1)
  for j, s in enumerate(stds):
    for i, (m, color) in enumerate(zip(config.eigen_means, colors)):
      log_r = out["log_rel_res"][i, j]                    # [D, L+1]
      axes[0, j].plot(l_K, np.exp(log_r.mean(0)), color=color, label=f"{m:g}")
      axes[0, j].fill_between(l_K, np.exp(log_r.min(0)), np.exp(log_r.max(0)),
                              color=color, alpha=0.15)
      axes[1, j].plot(l_K[1:], out["entropy"][i, j].mean(0), color=color)
    axes[0, j].set(yscale="log", title=f"eigen_std = {s:g}", ylim=(1e-8, 2))
    axes[1, j].axhline(np.log(config.seq_len), color="k", ls="--", lw=1)
    axes[1, j].set(xlabel="layer l")
  axes[0, 0].set_ylabel("||res(X^l)|| / ||X^l||")
  axes[1, 0].set_ylabel("attention entropy (layer l)")
  axes[0, 0].legend(title="eigen_mean", fontsize=7)
  fig.suptitle("Rank collapse and entropy per layer (geo-mean over draws, "
               "band: min-max; dashed: ln T)")
  return style.save_figure(fig, workdir, "fig_spectrum_layers")


def plot_rho(out, config, workdir):
  """rho_i of the last query at layer 1 and layer L, per grid point."""
  num_s = len(config.eigen_stds)
  fig, axes = style.subplots(2, num_s, (3.4 * num_s, 6), sharey=True)
  colors = _mean_colors(config)
  i_T = np.arange(1, config.seq_len + 1)
  for j, s in enumerate(config.eigen_stds):
    for i, (m, color) in enumerate(zip(config.eigen_means, colors)):
      for row, l in enumerate((0, config.num_layers - 1)):
        axes[row, j].plot(i_T, out["rho"][i, j, :, l].mean(0), color=color,
                          label=f"{m:g}")
    axes[0, j].set(title=f"eigen_std = {s:g}, layer 1")
    axes[1, j].set(title=f"layer {config.num_layers}", xlabel="position i")
  for ax in axes[:, 0]:
    ax.set_ylabel("rho_i (last query)")
  axes[0, 0].legend(title="eigen_mean", fontsize=7)
  return style.save_figure(fig, workdir, "fig_spectrum_rho")


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Sweeps the grid, checks the Sec. 5 claims, writes tables and figures."""
  workdir, paths = outputs.start_run(config, workdir, validate)
  out = sweep_from_config(config)
  grid_rows, layer_rows, rho_rows = tables(out, config)
  claim_rows = claims(grid_rows, config)
  cols = ["eigen_mean", "eigen_std", "r_trace", "collapse_depth",
          "log10_decay_per_layer", "entropy_l1", "entropy_mean",
          "rho_mean_l1", "eq9_violation_all", "zhai_violation_all"]
  outputs.show("spectrum_collapse grid:", outputs.format_table(grid_rows,
                                                              cols))
  outputs.show("Sec. 5 claims:", outputs.format_table(claim_rows, [
      "claim", "fixed", "values", "steps_supporting", "steps_against",
      "holds"]))
  paths += outputs.write_tables(dict(
      spectrum_grid=grid_rows, spectrum_layers=layer_rows,
      spectrum_rho=rho_rows, spectrum_claims=claim_rows), workdir)
  paths += [plot_grid(grid_rows, config, workdir),
            plot_layers(out, config, workdir),
            plot_rho(out, config, workdir)]
  outputs.log_outputs("spectrum_collapse", paths)
  return dict(raw=out, grid=grid_rows, layers=layer_rows, rho=rho_rows,
              claims=claim_rows, paths=paths)
