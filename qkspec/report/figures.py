"""The report's own figures: final values against kappa2 (Figs. 6, 8-12)
and each member's gap to kappa2 = 0 over training. Drawing only: the
sections (`sections`) save them and link them."""
import numpy as np

from qkspec.plots import style
from qkspec.plots import training_figures
from qkspec.records import rundir
from qkspec.report import locater_minimum
from qkspec.report import run_cells
from qkspec.report import stats

_GAP_PANELS = (("mean/entropy", "entropy",
                "attention entropy - kappa2 = 0 (nats)", "C"),
               ("valid/ppl", "valid_ppl", "valid perplexity - kappa2 = 0",
                "D"))


def seed_words(members) -> str:
  """"mean over seeds 0, 1" or "seed 0 (one seed)" of `members`."""
  seeds = sorted({m["seed"] for m in members})
  if len(seeds) == 1:
    return f"seed {seeds[0]} (one seed)"
  return f"mean over seeds {', '.join(map(str, seeds))}"


def kappa2_figure(rows, label):
  """Final scale, entropy and valid ppl vs kappa2, a line per reading and
  the no-LocATER member as a horizontal line."""
  panels = [("scale", "scale tr$(W_{QK}^\\top W_{QK})$", "B"),
            ("entropy", "attention entropy (nats)", "C"),
            ("valid_ppl", "valid perplexity", "D")]
  mine = [r for r in rows if r["label"] == label]
  readings = sorted({r["reading"] for r in mine})
  styles = [dict(ls="-", marker="o", lw=2.6, ms=7.1, mfc="none", zorder=2),
            dict(ls="--", marker="s", lw=1.3, ms=5.8, mfc="none", zorder=3)]
  fig, axes = style.plt.subplots(1, 3, figsize=(12, 3.8), layout="constrained")
  curves = {q: [] for q, _, _ in panels}
  for i, reading in enumerate(readings):
    rs = sorted((r for r in mine if r["reading"] == reading
                 and r["kappa1"] > 0), key=lambda r: r["kappa2"])
    if not rs:               # its no-LocATER member alone: nothing to draw
      continue
    for ax, (q, ylabel, _) in zip(axes, panels):
      means = [r[f"{q}_mean"] for r in rs]
      curves[q].append(means)
      ax.errorbar([r["kappa2"] for r in rs], means,
                  yerr=[np.nan_to_num(r[f"{q}_std"]) for r in rs],
                  capsize=3, color=f"C{i}",   # a reading's colour in all
                  label=f"{i + 1}: {run_cells.reading_name(reading)}",
                  **styles[i % len(styles)])
      ax.set(xlabel=r"$\kappa_2$", ylabel=ylabel)
  none = next((r for r in mine if r["kappa1"] == 0),
              None)                  # trains the same under both readings
  span = sorted({r["kappa2"] for r in mine if r["kappa1"] > 0})
  for ax, (q, _, _) in zip(axes[1:], panels[1:]):   # B: decades above
    if none is not None and span:
      value = none[f"{q}_mean"]
      ax.plot([span[0], span[-1]], [value, value], color="0.3", ls=":",
              lw=1.5, label=f"no LocATER ({value:.4g})")
      ax.legend(fontsize=8, loc="best")
  kappa2s, star = locater_minimum.star_curve(mine)
  if kappa2s:                  # the same W* under both readings
    axes[0].plot(kappa2s, star, ":", color="0.4", lw=1.5, zorder=1,
                 label="LocATER alone (W* = cI)")
  positive = [r["kappa2"] for r in rows if r["kappa2"] > 0]
  for ax, (q, ylabel, claim) in zip(axes, panels):
    ax.set_xscale("symlog", linthresh=min(positive) if positive else 1e-3)
    ax.grid(alpha=0.3)
    log = training_figures.set_yscale(ax, curves[q])   # readings decades apart
    note = training_figures.coincide_note(curves[q], log, what="readings")
    ax.set_title(f"{ylabel} ({claim})" + (f"\n{note}" if note else ""),
                 fontsize=10)
  axes[0].legend(loc="lower right")  # W* rises with kappa2: that corner's free
  seeds = {run_cells.reading_name(reading): sorted(
      {s for r in mine if r["reading"] == reading
       for s in r.get("seeds", ())}) for reading in readings}
  every = sorted({s for ss in seeds.values() for s in ss})
  if len(every) == 1:
    fig.suptitle(f"{label}: final values, seed {every[0]} (one seed, no "
                 "error bars)")
  else:
    fig.suptitle(f"{label}: final values, mean ± std over seeds" + (
        " (" + "; ".join(f"{name}: {', '.join(map(str, ss))}"
                         for name, ss in seeds.items()) + ")"
        if every else ""))
  return fig


def gap_figure(members, title: str):
  """C and D minus the kappa2 = 0 member's over training; None without
  that member's curves.

  Fig. 6C-D's claims rest on gaps far smaller than the curves' range: each
  member's seed-averaged curve minus the kappa2 = 0 member's, on a
  symmetric-log axis whose linear band is the minimal effect
  (`stats.MIN_EFFECT`).
  """
  groups = run_cells.seed_mean(members)
  base = next((m for m in groups if m["kappa1"] > 0 and m["kappa2"] == 0),
              None)
  if base is None or not all(k in base["metrics"] for k, *_ in _GAP_PANELS):
    return None
  others = [m for m in groups if m is not base]
  names = rundir.member_names([base] + others)[1:]
  fig, axes = style.plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
  for ax, (key, quantity, ylabel, claim) in zip(axes, _GAP_PANELS):
    level = float(base["metrics"][key][1][-1])   # as the verdicts: final
    band = stats.min_effect(quantity, level, level)
    ax.axhspan(-band, band, color="0.85", zorder=0,
               label=f"below the minimal effect (±{band:.2g})")
    ax.axhline(0.0, color="0.3", lw=0.8)
    for i, (m, name) in enumerate(zip(others, names)):
      if key in m["metrics"]:
        steps, d = stats.step_differences(base["metrics"][key],
                                                 m["metrics"][key])
        ax.plot(steps, d, color=f"C{i}", lw=1.3, label=name)
    ax.set_yscale("symlog", linthresh=band)
    ax.set(xlabel="step", ylabel=ylabel,
           title=f"{ylabel.split(' - ')[0]} ({claim}), difference")
    ax.grid(alpha=0.3)
  handles, labels = axes[1].get_legend_handles_labels()
  fig.legend(handles, labels, loc="outside lower center", ncol=3,
             fontsize=8)
  fig.suptitle(title)
  return fig


def has_curves(member) -> bool:
  """Does `member` keep a curve (>= 2 steps) of a `fig6_figure` panel?"""
  return any(len(member["metrics"].get(k, ((),))[0]) > 1 for k in (
      "mean/qk_scale", "mean/entropy", "valid/ppl", "valid/loss"))
