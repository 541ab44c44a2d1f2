"""Figures of a training workdir (paper Figs. 6-7 and App. D Figs. 8-12).

`plot_workdir` reads `members.json` and each member's metrics and writes
`fig6_curves.png` (Fig. 6 B-D against the step), `fig6_vs_kappa2.png` (the
same at the last step, against kappa2 when only kappa2 varies, else per
member), `rho_heatmap.png` (Fig. 7) and `training_curves.png` (losses,
tr(W_QK), eigen-variance (Eq. 8) and Dong's residual per layer). Each
member has its own colour, line style, marker and width; a panel says
which curves coincide.
"""
import os

from matplotlib import ticker
import numpy as np

from qkspec.plots import style
from qkspec.records import rundir

_LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)))
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_SCALE_LABEL = r"tr$(W_{QK}^\top W_{QK})$"
_TRACE_LABEL = r"tr$(W_{QK})$"


def coinciding(curves, span_frac: float = 0.0,
               log: bool = False) -> list[list[int]]:
  """Groups (2+ indices) of curves that agree on their common last values:
  within 1e-6 relative or `span_frac` of all values' span (log10 on a
  `log` axis); None or empty never matches."""
  vals = [None if c is None or not np.size(c) else np.asarray(c, float)
          for c in curves]
  present = [v for v in vals if v is not None]
  if not present:
    return []
  pooled = np.concatenate(present)
  if log and np.any(pooled > 0):
    pooled = np.log10(pooled[pooled > 0])
  span = float(np.ptp(pooled))

  def close(a, b):
    n = min(a.size, b.size)
    a, b = a[a.size - n:], b[b.size - n:]
    if np.allclose(a, b, rtol=1e-6, atol=0.0):
      return True
    if log and np.all(a > 0) and np.all(b > 0):
      a, b = np.log10(a), np.log10(b)
    return bool(np.max(np.abs(a - b)) <= span_frac * span)

  groups, used = [], set()
  for i, a in enumerate(vals):
    if i in used or a is None:
      continue
    group = [i] + [j for j in range(i + 1, len(vals)) if j not in used
                   and vals[j] is not None and close(a, vals[j])]
    if len(group) > 1:
      groups.append(group)
      used.update(group)
  return groups


def final_values_axis(members) -> str | None:
  """x axis of `fig6_vs_kappa2`: "kappa2" when only kappa2 (and the
  reading) varies, "member" when more does, else None."""
  varying = rundir.varying_fields(members)
  if len(members) < 2 or not varying:
    return None
  return ("kappa2" if varying in (["kappa2"], ["kappa2", "penalty_added_to"])
          else "member")


def _styles(members):
  """Per member: colour, line style, marker and width (earlier = wider)."""
  n = len(members)
  if final_values_axis(members) == "kappa2":     # colour follows kappa2
    cmap = style.plt.get_cmap("viridis")
    order = np.argsort([m["kappa2"] for m in members], kind="stable")
    colors = [None] * n
    for rank, i in enumerate(order):
      colors[i] = cmap(0.85 * rank / max(n - 1, 1))   # no pale yellow
  else:
    colors = [style.plt.get_cmap("tab10")(i % 10) for i in range(n)]
  widths = np.linspace(2.6, 1.1, n) if n > 1 else [1.8]
  return [dict(color=colors[i], ls=_LINESTYLES[i % len(_LINESTYLES)],
               marker=_MARKERS[i % len(_MARKERS)], lw=float(widths[i]),
               ms=float(widths[i]) + 4.5, mfc="none", zorder=2 + i)
          for i in range(n)]


def set_yscale(ax, curves):
  """Log y (labelled 1-2-5 ticks) when positive values span > 1 decade."""
  vals = np.concatenate([np.ravel(c) for c in curves if c is not None]
                        or [np.zeros(1)])
  vals = vals[np.isfinite(vals)]
  if not vals.size or vals.min() <= 0 or vals.max() / vals.min() <= 10:
    return False
  ax.set_yscale("log")
  decades = np.log10(vals.max() / vals.min())
  subs = (1.0, 2.0, 5.0) if decades <= 2.5 else (1.0,)
  ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
  ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
  ax.yaxis.set_minor_locator(ticker.LogLocator(base=10, subs="auto"))
  ax.yaxis.set_minor_formatter(ticker.NullFormatter())
  return True


def coincide_note(curves, log=False, what="curves") -> str:
  """"curves 1=2; 3=4 coincide ..." for `coinciding` groups, or ""."""
  exact = coinciding(curves)                         # equal to 1e-6 relative
  groups = coinciding(curves, span_frac=2e-3, log=log)   # same pixel row
  if not groups:
    return ""
  same = all(any(set(g) <= set(e) for e in exact) for g in groups)
  text = "; ".join("=".join(str(i + 1) for i in g) for g in groups)
  return (f"{what} {text} coincide"
          + (" (to 1e-6 rel.)" if same else " at this scale"))


def _title(ax, title, note):
  ax.set_title("\n".join(t for t in (title, note) if t))
  if note:
    ax.title.set_fontsize(9)


def _valid_key(metrics):
  if "valid/ppl" in metrics:
    return "valid/ppl", "valid perplexity"
  return "valid/loss", "valid loss"


def _member_panels(fig, axes, members, panels):
  """Draws `panels` ([(key, title, ylabel)]) on `axes`, legend below."""
  styles, names = _styles(members), rundir.member_names(members)
  for ax, (key, title, ylabel) in zip(axes, panels):
    curves = []          # one line per member that logged `key`
    for i, (m, look, name) in enumerate(zip(members, styles, names)):
      steps, vals = m["metrics"].get(key, ((), None))
      curves.append(vals)
      if vals is not None:
        every = max(1, len(steps) // 8)
        ax.plot(steps, vals, label=name,
                markevery=(i * every // len(members), every), **look)
    log = set_yscale(ax, curves)
    _title(ax, title, coincide_note(curves, log))
    ax.set(xlabel="step", ylabel=ylabel)
    ax.grid(alpha=0.3)
  for ax in axes[len(panels):]:
    ax.set_visible(False)
  fullest = max(axes, key=lambda ax: len(ax.get_lines()))
  handles, labels = fullest.get_legend_handles_labels()
  fig.legend(handles, labels, loc="outside lower center",
             ncol=min(len(members), 3))


def fig6_figure(members, figure: str = "6"):
  """Fig. 6 B-D against the step; `figure` names the figure the titles
  cite (Figs. 8-12 have these panels, Fig. 7's runs are named as such)."""
  valid, valid_label = _valid_key(members[0]["metrics"])

  def cite(panel):
    return (f"Fig. 7 runs, as Fig. 6{panel}" if figure == "7"
            else f"Fig. {figure}{panel}")
  panels = [("mean/qk_scale", f"eigenspectrum scale ({cite('B')})",
             _SCALE_LABEL),
            ("mean/entropy", f"attention entropy ({cite('C')})",
             "attention entropy (nats)"),
            (valid, f"{valid_label} ({cite('D')})", valid_label)]
  with style.plt.rc_context(style.FONT):
    fig, axes = style.subplots(1, 3, (13, 4.4))
    _member_panels(fig, list(axes[0]), members, panels)
  return fig


def _spread(vals):
  """Spread of the members' values, relative when it is tiny."""
  vals = np.asarray(vals, float)
  vals = vals[np.isfinite(vals)]
  if vals.size < 2:
    return ""
  spread, scale = np.ptp(vals), np.max(np.abs(vals))
  if scale and spread < 1e-3 * scale:
    return f"spread across members {spread / scale:.1e} relative"
  return ""


def vs_kappa2_figure(members):
  """Last-step Fig. 6 B-D values; None when `final_values_axis` is None."""
  axis = final_values_axis(members)
  if axis is None:
    return None
  valid, valid_label = _valid_key(members[0]["metrics"])
  keys = [("mean/qk_scale", "final " + _SCALE_LABEL),
          ("mean/entropy", "final attention entropy (nats)"),
          (valid, "final " + valid_label)]
  styles, names = _styles(members), rundir.member_names(members)
  with style.plt.rc_context(style.FONT):
    fig, axes = style.subplots(1, 3, (13, 4.2))
    for ax, (key, ylabel) in zip(axes[0], keys):
      vals = [rundir.final_value(m["metrics"], key) for m in members]
      xs = ([m["kappa2"] for m in members] if axis == "kappa2"
            else np.arange(len(members)))
      for x, y, look in zip(xs, vals, styles):
        ax.plot([x], [y], ls="none", color=look["color"],
                marker=look["marker"], ms=look["ms"] + 2, mfc="none",
                mew=2, zorder=look["zorder"])
      if axis == "kappa2":
        of = [m.get("penalty_added_to", rundir.DEFAULTS["penalty_added_to"])
              for m in members]
        readings = sorted(set(of))
        for reading, ls in zip(readings, ("-", "--")):
          line = [(x, y) for x, y, r in zip(xs, vals, of) if r == reading]
          ax.plot(*zip(*line), color="0.6", lw=1, ls=ls, zorder=1,
                  label=(f"{rundir.READING_NAMES[reading]} reading"
                         if len(readings) > 1 else None))
        if len(readings) > 1:
          ax.legend(loc="best", fontsize=8)
        positive = [k for k in xs if k > 0]
        ax.set_xscale("symlog", linthresh=min(positive) if positive else 1)
        ax.set_xlabel(r"LocATER strength $\kappa_2$")
        for x, y, m in zip(xs, vals, members):
          if m["kappa1"] == 0 and m["kappa2"] == 0:
            ax.annotate("no LocATER", (x, y), fontsize=8,
                        xytext=(4, 4), textcoords="offset points")
      else:
        ax.set_xticks(xs, [n.replace(", ", "\n") for n in names], fontsize=8)
        ax.set_xlim(-0.5, len(members) - 0.5)
        ax.set_xlabel("member (categorical: not a $\\kappa_2$ axis)")
      log = set_yscale(ax, [np.asarray(vals)])
      _title(ax, _spread(vals), coincide_note([[v] for v in vals], log,
                                              "values"))
      ax.set_ylabel(ylabel)
      ax.grid(alpha=0.3)
    varying = ", ".join(rundir.SYMBOLS[f]
                        for f in rundir.varying_fields(members))
    fig.suptitle("Fig. 6 quantities at the last step"
                 + f" (members differ in {varying}"
                 + (")" if axis == "member" else " only)"))
  return fig


def rho_heatmap_figure(members, layer=0):
  """Fig. 7: rho_i (colour) per key position i and step, one panel each."""
  one_head, head0 = rundir.rho_keys(layer)
  name = (one_head if any(one_head in m["metrics"] for m in members)
          else head0)
  shown = [i for i, m in enumerate(members) if name in m["metrics"]]
  names = rundir.member_names(members)
  with style.plt.rc_context(style.FONT):
    fig, axes = style.subplots(1, len(shown), (3.6 * len(shown) + 1.2, 3.8),
                               sharey=True)
    for ax, i in zip(axes[0], shown):
      steps, rho_SxT = members[i]["metrics"][name]
      T = rho_SxT.shape[1]
      im = ax.imshow(rho_SxT.T, aspect="auto", origin="lower", vmin=0,
                     vmax=1, cmap="magma", interpolation="nearest",
                     extent=(steps[0], steps[-1], 0.5, T + 0.5))
      ax.set(xlabel="step", title=names[i])
      ax.set_ylabel("key position i (query = last token)"
                    if ax is axes[0][0] else "key position i")
    fig.colorbar(im, ax=axes[0].tolist(), label=r"empirical $\rho_i$",
                 pad=0.01)
    fig.suptitle(f"Fig. 7: signal propagation probability, layer {layer}")
  return fig


def curve_panels(metrics):
  """[(key, title, ylabel)] of `training_curves` for a member's metrics."""
  units = sorted(k.rsplit("/", 1)[0] for k in metrics
                 if k.endswith("/qk_trace") and not k.startswith("mean/"))
  layers = sorted({u.split("/")[0] for u in units}, key=lambda l: int(l[1:]))
  valid, valid_label = _valid_key(metrics)
  lm = valid == "valid/ppl"
  panels = [("train/loss", "train loss",
             "train loss (nats/token)" if lm else "train loss"),
            (valid, valid_label, valid_label)]
  if len(units) == 1:                    # one layer, one head: no mean panel
    panels.append(("mean/qk_trace", _TRACE_LABEL, _TRACE_LABEL))
  else:
    panels += [(f"{units[0]}/qk_trace", f"{units[0]} {_TRACE_LABEL}",
                _TRACE_LABEL),
               ("mean/qk_trace", f"mean {_TRACE_LABEL} over layers and heads",
                _TRACE_LABEL)]
  panels.append(("mean/eigen_variance", "eigen-variance (Eq. 8)",
                 r"$d\,$tr$(W^2) -$ tr$(W)^2$"))
  panels += [(f"{l}/rank_residual", f"{l} rank-collapse residual",
              "relative residual (Dong)") for l in layers]
  return panels


def curves_figure(members):
  """Loss, tr(W_QK), eigen-variance and rank residual per layer."""
  panels = curve_panels(members[0]["metrics"])
  ncols = min(3, len(panels))
  nrows = -(-len(panels) // ncols)
  with style.plt.rc_context(style.FONT):
    fig, axes = style.subplots(nrows, ncols, (4.4 * ncols, 3.3 * nrows + 0.6))
    _member_panels(fig, list(axes.ravel()), members, panels)
  return fig


def figures(members, layer: int = 0) -> dict:
  """{file stem: Figure} of every figure the members allow."""
  out = dict(fig6_curves=fig6_figure(members),
             rho_heatmap=rho_heatmap_figure(members, layer),
             training_curves=curves_figure(members))
  vs = vs_kappa2_figure(members)      # None: the members do not differ
  if vs is not None:
    out["fig6_vs_kappa2"] = vs
  return out


def plot_workdir(workdir: str, layer: int = 0) -> list[str]:
  """Writes every figure of `workdir`; returns their paths."""
  paths = []
  for stem, fig in figures(rundir.load_members(workdir), layer).items():
    paths.append(style.save(fig, os.path.join(workdir, stem + ".png")))
  return paths
