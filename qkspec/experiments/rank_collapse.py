r"""Rank collapse per layer in random SANs: pure, +skip, +MLP, +LN, full block.

Shapes: A = architectures, S = weight draws (seeds), N = sequences per draw,
L = layers, T = tokens, d = token dimension, K = L + 1 path lengths.

Per architecture (`san.ARCHITECTURES`) and residual method, the relative
residual :math:`r_l = \|\mathrm{res}(X^l)\|/\|X^l\|` (Dong et al., Fig. 1),
its order of convergence q in :math:`\log r_{l+1} = q\log r_l + a` (Dong's
Theorem 2.2 predicts 3, an exponential decay 1) and fits of :math:`\log r_l
= a + b\,3^l` and :math:`a + b\,l`; for the pure SAN the cubic bound of
`san_paths.cubic_residual_coefficient`, for the skip SAN the output each
path length carries beside the path count :math:`\binom Lk H^k/(H+1)^L`.
"""
# pylint: disable=invalid-name
import functools

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.theory import diagnostics
from qkspec.theory import san
from qkspec.theory import san_paths
from qkspec.theory import softmax
from qkspec.experiments import measures
from qkspec.experiments import outputs
from qkspec.plots import style


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of a rank_collapse config."""
  outputs.require_ints(config, {
      "num_seeds": 1, "num_sequences": 1, "num_layers": 1, "num_heads": 1,
      "dim": 1, "head_dim": 1, "mlp_dim": 1, "seq_len": 2,
      "composite_steps": 1})
  outputs.require_subset(config, "architectures", san.ARCHITECTURES)
  outputs.require_subset(config, "methods", diagnostics.RESIDUAL_METHODS)
  outputs.require_in(config, "inputs", san.INPUTS)
  outputs.require_in(config, "value_init", san.VALUE_INITS)
  outputs.require_temperature(config)
  outputs.require(0 < config.floor < config.fit_max_residual <= 1, "floor",
                  "and fit_max_residual must satisfy 0 < floor < fit_max <= 1",
                  (config.floor, config.fit_max_residual))


# The config fields that set `measure`'s shapes and options.
_STATIC = ("num_seeds", "num_sequences", "num_layers", "num_heads", "dim",
           "head_dim", "mlp_dim", "seq_len", "inputs", "value_init",
           "composite_steps")


@functools.partial(jax.jit,
                   static_argnames=("architectures", "methods") + _STATIC)
def measure(key, qk_gain, lam, *, architectures, methods, num_seeds,
            num_sequences, num_layers, num_heads, dim, head_dim, mlp_dim,
            seq_len, inputs, value_init, composite_steps):
  """Relative residuals [S, N, L+1] per (arch, method), bound and path data."""

  def one_seed(seed):
    k_w, k_x = jax.random.split(jax.random.fold_in(key, seed))
    params = san.init_params(
        k_w, num_layers=num_layers, num_heads=num_heads, dim=dim,
        head_dim=head_dim, mlp_dim=mlp_dim, qk_gain=qk_gain,
        value_init=value_init)
    x_NxTxd = san.sample_inputs(k_x, inputs, num_sequences, seq_len, dim)
    out = {}
    for name in architectures:
      run = jax.vmap(lambda x, a=san.ARCHITECTURES[name]:   # noqa: B023
                     san.forward(params, x, a, lam))(x_NxTxd)
      xs_NxKxTxd = run["outputs"]
      for method in methods:
        out[f"rel/{name}/{method}"] = diagnostics.relative_residual(
            xs_NxKxTxd, method, composite_steps)
      if name == "san":
        out["abs_res_san"] = diagnostics.rank_collapse_residual(
            xs_NxKxTxd, "mean")
        out["norm_san"] = jnp.sqrt(jnp.sum(xs_NxKxTxd**2, axis=(-2, -1)))
      if name == "san_skip":
        z_NxKxTxd = jax.vmap(san_paths.path_length_components,
                             in_axes=(0, 0, None))(
                                 x_NxTxd, run["probs"], params["w_v"])
        norm_N = jnp.sqrt(jnp.sum(xs_NxKxTxd[:, -1]**2, axis=(-2, -1)))
        out["path_share"] = jnp.sqrt(jnp.sum(z_NxKxTxd**2, axis=(-2, -1))
                                     ) / norm_N[:, None]
        out["path_rel_res"] = diagnostics.relative_residual(z_NxKxTxd, "mean")
    out["cubic_c"] = san_paths.cubic_residual_coefficient(
        params["w_qk"], params["w_v"], lam)
    return out

  return jax.vmap(one_seed)(jnp.arange(num_seeds))


def run_measure(config) -> dict:
  """`measure` on a validated config, numpy out."""
  with jax.enable_x64(bool(config.float64)):
    out = measure(jax.random.key(config.seed), config.qk_gain,
                  softmax.temperature(config.temperature, config.head_dim),
                  architectures=tuple(config.architectures),
                  methods=tuple(config.methods),
                  **{k: config[k] for k in _STATIC})
    return jax.tree.map(lambda a: np.asarray(a, np.float64), out)


def convergence_order(r_K: np.ndarray, floor: float, max_r: float
                      ) -> tuple[float, float, int]:
  r"""(q, a, pairs) of :math:`\log r_{l+1} = q\log r_l + a` over the pairs
  with floor < :math:`r_l \le` max_r and :math:`r_{l+1} >` floor; NaN
  below 2 pairs."""
  r_K = np.asarray(r_K, np.float64)
  ok = (r_K[:-1] > floor) & (r_K[:-1] <= max_r) & (r_K[1:] > floor)
  if ok.sum() < 2:
    return float("nan"), float("nan"), int(ok.sum())
  order, a = np.polyfit(np.log(r_K[:-1][ok]), np.log(r_K[1:][ok]), 1)
  return float(order), float(a), int(ok.sum())


def _linear_fit(feature, y):
  """(intercept, slope, R^2) of y ~ a + b feature."""
  if len(y) < 3:
    return float("nan"), float("nan"), float("nan")
  b, a = np.polyfit(feature, y, 1)
  resid = y - (a + b * feature)
  ss = np.sum((y - y.mean())**2)
  return float(a), float(b), float(1 - np.sum(resid**2) / ss) if ss else 1.0


def closed_form_fits(r_K: np.ndarray, floor: float) -> dict[str, float]:
  r"""Dong's :math:`\log r_l = a + b\,3^l` and :math:`a + b\,l`, fitted on
  the layers with :math:`r_l >` floor."""
  r_K = np.asarray(r_K, np.float64)
  l_K = np.arange(len(r_K), dtype=np.float64)
  ok = r_K > floor
  y = np.log(r_K[ok])
  a3, b3, r2_3 = _linear_fit(3.0**l_K[ok], y)
  a1, b1, r2_1 = _linear_fit(l_K[ok], y)
  return dict(dong_a=a3, dong_b=b3, dong_r2=r2_3, exp_a=a1, exp_rate=b1,
              exp_r2=r2_1, fit_layers=int(ok.sum()))


def _geo_mean(a, floor, axis):
  return np.exp(np.mean(np.log(np.maximum(a, floor)), axis=axis))


def _curves(out, name, method, floor):
  """r_l geo-mean over sequences per seed [S, K], and over seeds [K]."""
  per_seed_SxK = _geo_mean(out[f"rel/{name}/{method}"], floor, axis=1)
  return per_seed_SxK, _geo_mean(per_seed_SxK, floor, axis=0)


def tables(out: dict, config) -> dict[str, list[dict]]:
  """Curve, fit, bound and path-length rows."""
  floor = config.floor
  plot_floor = floor * 1e-2
  curves, fits = [], []
  for name in config.architectures:
    for method in config.methods:
      rel_SxNxK = out[f"rel/{name}/{method}"]
      per_seed_SxK, geo_K = _curves(out, name, method, plot_floor)
      for l in range(rel_SxNxK.shape[-1]):
        curves.append(dict(
            architecture=name, method=method, layer=l,
            rel_res_geomean=float(geo_K[l]),
            rel_res_min=float(per_seed_SxK[:, l].min()),
            rel_res_max=float(per_seed_SxK[:, l].max()),
            below_floor_fraction=float(np.mean(rel_SxNxK[..., l] <= floor))))
      seed_orders = [convergence_order(r, floor, config.fit_max_residual)[0]
                     for r in per_seed_SxK]
      no_fit = not np.isfinite(seed_orders).any()
      order, a, pairs = convergence_order(geo_K, floor,
                                          config.fit_max_residual)
      fits.append(dict(
          architecture=name, method=method, order=order, order_intercept=a,
          order_pairs=pairs,
          order_seed_mean=float("nan" if no_fit else np.nanmean(seed_orders)),
          order_seed_std=float("nan" if no_fit else np.nanstd(seed_orders)),
          **closed_form_fits(geo_K, floor),
          collapse_depth_1e_6=measures.collapse_depth(geo_K, 1e-6),
          rel_res_last=float(geo_K[-1])))
  bound = []
  if "abs_res_san" in out:
    res_SxNxK = out["abs_res_san"]
    c_SxL = out["cubic_c"]
    for s, n, l in np.ndindex(*res_SxNxK.shape[:2], c_SxL.shape[1]):
      r_now, r_next = res_SxNxK[s, n, l], res_SxNxK[s, n, l + 1]
      one_step = c_SxL[s, l] * r_now**3
      # Below the float floor the residual is rounding noise, not maths.
      at_floor = r_next <= config.floor * out["norm_san"][s, n, l + 1]
      bound.append(dict(seed=s, sequence=n, layer=l + 1,
                        residual=float(r_next), one_step_bound=one_step,
                        at_float_floor=bool(at_floor),
                        holds=bool(r_next <= one_step * (1 + 1e-9) or at_floor),
                        contraction=float(c_SxL[s, l] * r_now**2)))
  lengths = []
  if "path_share" in out:
    frac_K = san_paths.path_length_fractions(config.num_layers,
                                             config.num_heads)
    share_K = out["path_share"].mean(axis=(0, 1))
    relres_K = _geo_mean(out["path_rel_res"], plot_floor, axis=(0, 1))
    for k in range(len(frac_K)):
      lengths.append(dict(length=k, path_fraction=float(frac_K[k]),
                          norm_share=float(share_K[k]),
                          rel_res_geomean=float(relres_K[k])))
  return dict(collapse_curves=curves, collapse_fits=fits, cubic_bound=bound,
              path_lengths=lengths)


def plot_collapse(out, config, workdir):
  """Dong Fig. 1 style: r_l per architecture, one panel per residual method."""
  methods = list(config.methods)
  plot_floor = config.floor * 1e-2
  fig, axes = style.subplots(1, len(methods), (5 * len(methods), 4),
                             sharey=True)
  colors = style.colors("tab10", np.arange(len(config.architectures)))
  l_K = np.arange(config.num_layers + 1)
  for ax, method in zip(axes[0], methods):
    for color, name in zip(colors, config.architectures):
      per_seed, geo = _curves(out, name, method, plot_floor)
      ax.plot(l_K, geo, color=color, lw=2, label=name)
      ax.fill_between(l_K, per_seed.min(0), per_seed.max(0), color=color,
                      alpha=0.2)
    ax.axhline(config.floor, color="k", ls=":", lw=1)
    ax.set(yscale="log", ylim=(plot_floor, 2.0), xlabel="layer l")
    ax.set_title(f"residual: {method}", fontsize=10)
  axes[0, 0].set_ylabel("||res(X^l)|| / ||X^l||")
  axes[0, 0].legend(fontsize=8, loc="lower left")
  fig.suptitle(f"Rank collapse at init (L={config.num_layers}, "
               f"H={config.num_heads}, d={config.dim}, T={config.seq_len}, "
               f"{config.inputs} inputs; line: geo-mean over "
               f"{config.num_seeds} seeds, band: min-max; dotted: floor)",
               fontsize=10)
  return style.save_figure(fig, workdir, "fig_rank_collapse")


def plot_paths(rows, config, workdir):
  """The skip SAN's path-length distribution vs the norm each length carries."""
  k = np.array([r["length"] for r in rows])
  fig, ((ax, ax_res),) = style.subplots(1, 2, (10, 3.8))
  ax.bar(k - 0.2, [r["path_fraction"] for r in rows], width=0.4,
         label="fraction of paths C(L,k)H^k/(H+1)^L")
  ax.bar(k + 0.2, [r["norm_share"] for r in rows], width=0.4,
         label="||Z_k|| / ||X^L|| (measured)")
  ax.set(xlabel="path length k (attention layers used)", ylabel="fraction")
  ax.legend(fontsize=8)
  ax_res.semilogy(k, [max(r["rel_res_geomean"], config.floor * 1e-2)
                      for r in rows], "o-")
  ax_res.set(xlabel="path length k", ylabel="rel. residual of Z_k (mean)",
             title="sum of paths of length k", ylim=(config.floor * 1e-2, 2))
  fig.suptitle(f"Skip SAN as an ensemble of paths (L={config.num_layers}, "
               f"H={config.num_heads})", fontsize=10)
  return style.save_figure(fig, workdir, "fig_paths")


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Measures, fits, writes tables and figures into `workdir`."""
  workdir, written = outputs.start_run(config, workdir, validate)
  with outputs.heartbeat("rank_collapse (compiling and measuring)"):
    out = run_measure(config)
  rows = tables(out, config)
  fit_cols = ["architecture", "method", "order", "order_seed_mean",
              "order_seed_std", "order_pairs", "dong_r2", "exp_r2",
              "exp_rate", "collapse_depth_1e_6", "rel_res_last"]
  outputs.show("rank_collapse fits (order: of convergence, 3 = Dong's "
               "cubic, 1 = exponential):",
               outputs.format_table(rows["collapse_fits"], fit_cols))
  if rows["cubic_bound"]:
    holds = np.mean([r["holds"] for r in rows["cubic_bound"]])
    floor_steps = sum(r["at_float_floor"] for r in rows["cubic_bound"])
    msg = (f"pure SAN: ||res(X^(l+1))||_F <= c_l ||res(X^l)||_F^3 holds on "
           f"{100 * holds:.1f}% of {len(rows['cubic_bound'])} layer steps "
           f"({floor_steps} steps at the float floor (rel. res <= "
           f"{config.floor:g}) count as holding)")
    logging.info(msg)
    print(msg, flush=True)
  written += outputs.write_tables(rows, workdir)
  written.append(plot_collapse(out, config, workdir))
  if rows["path_lengths"]:
    written.append(plot_paths(rows["path_lengths"], config, workdir))
  outputs.log_outputs("rank_collapse", written)
  return dict(raw=out, **rows, paths=written)
