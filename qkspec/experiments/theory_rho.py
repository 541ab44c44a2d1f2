r"""Analytic :math:`\rho(\theta)` of Eq. (6): Figs. 2-3 and the Lemma 2 table.

Shapes: E = eta values, X = xi values, Th = theta points in [0, 1].

Both Lemma 1 variances are drawn, "paper" and "corrected"
(`qkspec.theory.propagation`). Lemma 2 is checked at :math:`|\xi|` =
`config.lemma2.xi`, :math:`\eta = |r|/|\xi|`: cases 1-2 (sites) and 4
(vanishing) hold; case 3 (uniformity) only in part, as at :math:`\xi = 0`
Eq. (6) is :math:`\tfrac12\mathrm{erf}(1/(\eta\sqrt{2c(\theta)}))`, which
still depends on :math:`\theta`: the table shows the vanishing
:math:`\xi`-dependent part of :math:`\rho'` and :math:`\max|\rho'|` at
:math:`\xi = 0`.
"""
# pylint: disable=invalid-name
import functools

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from qkspec.theory import propagation
from qkspec.experiments import outputs
from qkspec.plots import style


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of a theory_rho config."""
  outputs.require_ints(config, {"num_theta": 2, "num_xi": 2})
  outputs.require_positive(config, "xi_max", "lemma2.xi", "lemma2.tol",
                           "lemma2.slope_tol", "lemma2.vanish_eta")
  for field in ("eta_values", "lemma2.uniform_etas", "lemma2.zero_xi_etas",
                "lemma2.uniform_xis"):
    outputs.require(len(config[field]) > 0 and min(config[field]) > 0,
                    field, "must be non-empty and all > 0", config[field])
  outputs.require(len(config.xi_values) > 0, "xi_values", "must be non-empty",
                  config.xi_values)
  outputs.require_subset(config, "variants", propagation.VARIANTS)
  outputs.require(all(len(p) == 2 and p[1] > 0 for p in config.localized),
                  "localized", "must hold (xi, eta) pairs with eta > 0",
                  config.localized)
  exclude = config.lemma2.exclude
  outputs.require(0 < exclude < 0.5, "lemma2.exclude", "must be in (0, 0.5)",
                  exclude)


def rho_theta_map(theta_Th, xi_X, eta_E, variant):
  """Eq. (6) on the (eta, xi, theta) grid of Fig. 2, [E, X, Th]."""
  return propagation.rho_theta(theta_Th[None, None, :], xi_X[None, :, None],
                               eta_E[:, None, None], variant)


@functools.partial(jax.jit, static_argnames="variant")
def rho_slope(theta_Th, xi, eta, variant):
  r""":math:`\partial\rho/\partial\theta` of Eq. (6) by autodiff, [Th]."""
  grad = jax.grad(lambda th: propagation.rho_theta(th, xi, eta, variant))
  return jax.vmap(grad)(theta_Th)


def _site(r):
  """Lemma 2 (1-2) at r = xi eta: the case and the limit of rho(theta)."""
  edge = f"1/2+1/r={0.5 + 1 / r:.3g}"
  if abs(r) <= 2:
    return (("1 late-site", "1{theta>=1/2}") if r > 0
            else ("2 early-site", "1{theta<=1/2}"))
  if r > 0:
    return "1 middle-site", f"1{{1/2<=theta<={edge}}}"
  return "2 middle-site (mirrored)", f"1{{{edge}<=theta<=1/2}}"


def _row(case, variant, params, predicted, deviation, tol, note=""):
  return dict(case=case, variant=variant, parameters=params,
              predicted=predicted, max_abs_deviation=float(deviation),
              tolerance=tol, passed=bool(deviation <= tol), note=note)


def lemma2_table(config: ml_collections.ConfigDict) -> list[dict]:
  """Numerical check of every case of Lemma 2 under each variant."""
  lem = config.lemma2
  theta = jnp.linspace(0.0, 1.0, config.num_theta)
  theta_np = np.asarray(theta)
  rows = []
  for variant in config.variants:
    for r in lem.r_values:                                   # Lemma 2 (1-2)
      xi, eta = np.sign(r) * lem.xi, abs(r) / lem.xi
      rho = np.asarray(propagation.rho_theta(theta, xi, eta, variant))
      limit = np.asarray(propagation.rho_trace_limit(theta, r))
      keep = ((np.abs(theta_np - 0.5) > lem.exclude)
              & (np.abs(theta_np - (0.5 + 1 / r)) > lem.exclude))
      dev = np.max(np.abs(rho - limit)[keep])
      case, limit = _site(r)
      rows.append(_row(case, variant, f"xi={xi:g}, eta={eta:.3g}, r={r:g}",
                       limit, dev, lem.tol,
                       f"theta within {lem.exclude} of the jumps excluded"))
    xi_small = min(lem.uniform_xis)                          # Lemma 2 (3)
    for eta in lem.uniform_etas:
      base = rho_slope(theta, 0.0, eta, variant)
      devs = {xi: float(jnp.max(jnp.abs(rho_slope(theta, xi, eta, variant)
                                        - base)))
              for xi in sorted(lem.uniform_xis, reverse=True)}
      trend = ", ".join(f"xi={xi:g}: {d:.2g}" for xi, d in devs.items())
      rows.append(_row("3 uniformity (xi-part of rho')", variant,
                       f"xi={xi_small:g}, eta={eta:g}",
                       "max|rho'(xi)-rho'(0)| -> 0", devs[xi_small],
                       lem.slope_tol, f"O(xi): {trend}"))
    for eta in lem.zero_xi_etas:
      dev = float(jnp.max(jnp.abs(rho_slope(theta, 0.0, eta, variant))))
      flat = dev <= lem.slope_tol
      note = ("flat only because eta is extreme (rho -> 1/2 or 0)" if flat
              else "claim fails: rho=erf(1/(eta sqrt(2c(theta))))/2 "
                   "depends on theta")
      rows.append(_row("3 uniformity as printed (|rho'| at xi=0)", variant,
                       f"xi=0, eta={eta:g}", "|rho'| -> 0 (paper)", dev,
                       lem.slope_tol, note))
    for xi in lem.vanish_xis:                                # Lemma 2 (4)
      rho = propagation.rho_theta(theta, xi, lem.vanish_eta, variant)
      rows.append(_row("4 vanishing", variant,
                       f"xi={xi:g}, eta={lem.vanish_eta:g}", "0",
                       float(jnp.max(jnp.abs(rho))), lem.tol))
  return rows


_XI, _ETA, _THETA = r"$\xi$", r"$\eta$", r"$\theta = i/T$"
_RHO = r"$\rho(\theta)$"


def _heatmaps(axes_row, maps_ExXxTh, config, cmap, vmin, vmax, xlabel=True):
  extent = (-config.xi_max, config.xi_max, 0.0, 1.0)
  half = config.xi_max / 2
  for ax, rho_XxTh, eta in zip(axes_row, maps_ExXxTh, config.eta_values):
    image = ax.imshow(np.asarray(rho_XxTh).T, origin="lower", aspect="auto",
                      extent=extent, cmap=cmap, vmin=vmin, vmax=vmax)
    ax.set_title(f"{_ETA} = {eta:g}", fontsize=10)
    # Inner ticks only: edge labels of neighbouring panels would collide.
    ax.set_xticks([-half, 0.0, half])
    ax.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    ax.tick_params(labelsize=9)
    if xlabel:
      ax.set_xlabel(_XI)
  axes_row[0].set_ylabel(_THETA)
  return image


def fig2_figures(maps, config) -> dict:
  """{file stem: Figure}: Fig. 2 per variant, and the side-by-side view."""
  num_eta = len(config.eta_values)
  figs = {}
  for variant, maps_ExXxTh in maps.items():
    fig, axes = style.subplots(1, num_eta, (2.6 * num_eta + 1.0, 3.0),
                               sharey=True)
    image = _heatmaps(axes[0], maps_ExXxTh, config, "viridis", 0.0, 1.0)
    fig.colorbar(image, ax=axes[0].tolist(), label=_RHO)
    fig.suptitle(f"Eq. (6), variant={variant!r} (cf. paper Fig. 2; "
                 f"{_XI} = tr$W$/$\\sqrt{{\\mathrm{{tr}}W^2}}$)")
    figs[f"fig2_{variant}"] = fig
  if set(maps) == set(propagation.VARIANTS):
    fig, axes = style.subplots(3, num_eta, (2.6 * num_eta + 1.0, 8.0),
                               sharex=True, sharey=True)
    for row, variant in zip(axes[:2], ("paper", "corrected")):
      image = _heatmaps(row, maps[variant], config, "viridis", 0.0, 1.0,
                        xlabel=False)
      row[0].set_ylabel(f"{variant}\n{_THETA}")
    fig.colorbar(image, ax=axes[:2].ravel().tolist(), label=_RHO)
    diff = maps["corrected"] - maps["paper"]
    image = _heatmaps(axes[2], diff, config, "RdBu_r", -1.0, 1.0)
    axes[2][0].set_ylabel(f"corrected - paper\n{_THETA}")
    fig.colorbar(image, ax=axes[2].tolist(),
                 label=r"$\Delta\rho$ (corrected - paper)")
    fig.suptitle("Eq. (6): printed vs corrected Lemma 1 variance")
    figs["fig2_compare"] = fig
  return figs


def fig3_figure(theta, curves, config):
  """Fig. 3: the localized cases, both variants and the Lemma 2 limit."""
  cases = list(config.localized)
  fig, axes = style.subplots(1, len(cases), (4.4 * len(cases), 3.6),
                             sharey=True)
  for ax, (xi, eta) in zip(axes[0], cases):
    for variant, line in zip(config.variants, ("-", "--")):
      ax.plot(theta, curves[(variant, xi, eta)], line, label=variant)
    limit = propagation.rho_trace_limit(theta, xi * eta)
    ax.plot(theta, limit, ":", color="gray", label="Lemma 2 limit")
    ax.set_title(f"{_XI} = {xi:g}, {_ETA} = {eta:g}, "
                 f"$r = \\xi\\eta$ = {xi * eta:.3g}")
    ax.set(xlabel=_THETA, ylabel=_RHO, ylim=(-0.03, 1.03))
  axes[0][0].legend(fontsize=8)
  fig.suptitle(f"Localized {_RHO} (cf. paper Fig. 3; {_ETA} = 0.01, "
               "not the 0.02 of the text)")
  return fig


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Draws Figs. 2-3 and writes the Lemma 2 table into `workdir`."""
  workdir, paths = outputs.start_run(config, workdir, validate)
  theta = jnp.linspace(0.0, 1.0, config.num_theta)
  xi_dense = jnp.linspace(-config.xi_max, config.xi_max, config.num_xi)
  eta = jnp.asarray(config.eta_values, jnp.float32)
  xi_table = jnp.asarray(config.xi_values, jnp.float32)

  maps = {v: np.asarray(rho_theta_map(theta, xi_dense, eta, v))
          for v in config.variants}
  paths += [style.save_figure(fig, workdir, stem)
            for stem, fig in fig2_figures(maps, config).items()]
  fig2_rows = []
  eta_np, xi_np, theta_np = (np.asarray(a) for a in (eta, xi_table, theta))
  for v in config.variants:
    table_ExXxTh = np.asarray(rho_theta_map(theta, xi_table, eta, v))
    fig2_rows += [dict(variant=v, xi=float(xi_np[x]), eta=float(eta_np[e]),
                       theta=float(theta_np[t]), rho=float(rho))
                  for (e, x, t), rho in np.ndenumerate(table_ExXxTh)]
  paths += outputs.write_table(fig2_rows, workdir, "fig2_rho")

  curves, fig3_rows = {}, []
  for v in config.variants:
    for xi, eta_k in config.localized:
      rho = np.asarray(propagation.rho_theta(theta, xi, eta_k, v))
      curves[(v, xi, eta_k)] = rho
      fig3_rows += [dict(variant=v, xi=xi, eta=eta_k, r=xi * eta_k,
                         theta=float(t), rho=float(p))
                    for t, p in zip(theta_np, rho)]
  paths.append(style.save_figure(fig3_figure(theta_np, curves, config),
                                 workdir, "fig3_localized"))
  paths += outputs.write_table(fig3_rows, workdir, "fig3_rho")

  rows = lemma2_table(config)
  logging.info("Lemma 2 numerical check:\n%s", outputs.format_table(
      rows, ("case", "variant", "parameters", "predicted",
             "max_abs_deviation", "passed", "note")))
  paths += outputs.write_table(rows, workdir, "lemma2")
  outputs.log_outputs("theory_rho", paths)
  return dict(lemma2=rows, fig2=maps, fig3=curves, paths=paths)
