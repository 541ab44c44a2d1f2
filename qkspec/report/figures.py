"""Every figure of the report: final values against kappa2 (Figs. 6,
8-12), each cell's curves over training and their gaps to kappa2 = 0, and
Fig. 7's rho_i maps. Drawing only, from the evidence's groups and members:
the sections (`sections`) save them and link them."""
import numpy as np

from qkspec.plots import style
from qkspec.plots import training_figures
from qkspec.records import rundir
from qkspec.report import locater_minimum
from qkspec.report import run_cells
from qkspec.report import stats


def seed_mean(members) -> list[dict]:
  """Members differing only in seed -> one each, each metric averaged over
  seeds at the steps all logged."""
  groups = {}
  for m in members:
    groups.setdefault(run_cells.member_key(m)[:3], []).append(m)
  out = []
  for ms in groups.values():
    metrics = {}
    for key in set.intersection(*(set(m["metrics"]) for m in ms)):
      n = min(len(m["metrics"][key][0]) for m in ms)
      steps = [np.asarray(m["metrics"][key][0][:n]) for m in ms]
      if n and all(np.array_equal(steps[0], st) for st in steps):
        metrics[key] = (steps[0], np.mean(
            [np.asarray(m["metrics"][key][1][:n]) for m in ms], axis=0))
    out.append({**ms[0], "metrics": metrics, "n_seeds": len(ms)})
  return out


def curves_figure(means, figure: str, title: str):
  """Scale, entropy and perplexity over training of the members averaged
  over seeds (`seed_mean`), as the paper's Fig. 6B-D."""
  fig = training_figures.fig6_figure(means, figure)
  fig.suptitle(title)
  return fig


def rho_figure(members):
  """Fig. 7's rho_i over training, a heat map per member."""
  return training_figures.rho_heatmap_figure(list(members))

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


_PANELS = (("scale", "scale tr$(W_{QK}^\\top W_{QK})$", "B"),
           ("entropy", "attention entropy (nats)", "C"),
           ("valid_ppl", "valid perplexity", "D"))
_STYLES = (dict(ls="-", marker="o", lw=2.6, ms=7.1, mfc="none", zorder=2),
           dict(ls="--", marker="s", lw=1.3, ms=5.8, mfc="none", zorder=3))


def paired_differences(base, alt, quantity) -> tuple[float, tuple | None]:
  """(mean alt - base over common seeds, its 95% paired interval or None
  with one seed)."""
  _, d = run_cells.paired(base, alt, quantity)
  if len(d) >= 2:
    test = stats.paired_test(d)
    return test["mean"], test["ci"]
  return (float(d[0]) if len(d) else np.nan), None


def _values_row(axes, mine, readings, minimum):
  """Top row: final values (seed means) against kappa2, a line per
  reading; the no-LocATER member as a horizontal line on every panel."""
  curves = {q: [] for q, _, _ in _PANELS}
  for i, reading in enumerate(readings):
    rs = sorted((g for g in mine if g.reading == reading
                 and g.kappa1 > 0), key=lambda g: g.kappa2)
    for ax, (q, ylabel, _) in zip(axes, _PANELS):
      means = [g.mean[q] for g in rs]
      curves[q].append(means)
      ax.plot([g.kappa2 for g in rs], means, color=f"C{i}",
              label=f"{i + 1}: {run_cells.reading_name(reading)}",
              **_STYLES[i % len(_STYLES)])
      ax.set(xlabel=r"$\kappa_2$", ylabel=ylabel)
  none = next((g for g in mine if g.kappa1 == 0),
              None)                  # trains the same under both readings
  span = sorted({g.kappa2 for g in mine if g.kappa1 > 0})
  if none is not None and span:
    for ax, (q, _, _) in zip(axes, _PANELS):
      value = none.mean[q]
      curves[q].append([value])
      ax.plot([span[0], span[-1]], [value, value], color="C2", ls="-.",
              lw=1.5, label=f"no LocATER ({value:.4g})")
  kappa2s, star = locater_minimum.star_curve(minimum)
  if kappa2s:                  # the same W* under both readings
    axes[0].plot(kappa2s, star, ":", color="0.4", lw=1.5, zorder=1,
                 label="LocATER alone (W* = cI)")   # 0 at kappa2 = 0
  return curves


def _difference_row(axes, mine, readings):
  """Bottom row: alt - base (kappa2 = 0) paired over seeds, with its 95%
  interval (one seed: none), on a band (a reading's colour) of the minimal
  effect."""
  intervals = False
  for i, reading in enumerate(readings):
    rs = sorted((g for g in mine if g.reading == reading
                 and g.kappa1 > 0), key=lambda g: g.kappa2)
    base = next((g for g in rs if g.kappa2 == 0), None)
    if base is None:
      continue
    for ax, (q, ylabel, claim) in zip(axes, _PANELS):
      swept = [g for g in rs if g.kappa2 > 0]
      found = [paired_differences(base, g, q) for g in swept]
      intervals |= any(ci for _, ci in found)
      lo = [m - ci[0] if ci else 0.0 for m, ci in found]
      hi = [ci[1] - m if ci else 0.0 for m, ci in found]
      ax.errorbar([g.kappa2 for g in swept], [m for m, _ in found],
                  yerr=[lo, hi], capsize=3, color=f"C{i}",
                  **_STYLES[i % len(_STYLES)])
      band = stats.min_effect(q, base.mean[q], base.mean[q])
      ax.axhspan(-band, band, color=f"C{i}", alpha=0.1, lw=0, zorder=0)
      ax.axhline(0.0, color="0.3", lw=0.8)
      ax.set(xlabel=r"$\kappa_2$", ylabel=f"{ylabel.split(' (')[0]} - "
             r"$\kappa_2 = 0$", xscale="log")
  for ax, (_, _, claim) in zip(axes, _PANELS):
    ax.set_title(f"{claim}: minus $\\kappa_2 = 0$"
                 + (" (95% CI)" if intervals else " (one seed)")
                 + "\nshaded: below the minimal effect", fontsize=10)


def kappa2_figure(groups, label, minimum=()):
  """Top: final scale, entropy and valid ppl vs kappa2, a line per reading,
  no LocATER and (B) W* (`minimum`: `locater_minimum.compare`'s rows) as
  lines. Bottom: each kappa2 > 0 minus kappa2 = 0, paired over seeds, with
  its 95% interval (one seed: none)."""
  mine = [g for g in groups if g.label == label]
  readings = sorted({g.reading for g in mine if g.kappa1 > 0})
  fig, axes = style.subplots(2, 3, figsize=(12, 7.2))
  curves = _values_row(axes[0], mine, readings,
                       [c for c in minimum if c.label == label])
  _difference_row(axes[1], mine, readings)
  positive = [g.kappa2 for g in groups if g.kappa2 > 0]
  for ax, (q, ylabel, claim) in zip(axes[0], _PANELS):
    log = training_figures.set_yscale(ax, curves[q])   # decades apart
    note = training_figures.coincide_note(curves[q][:len(readings)], log,
                                          what="readings")
    ax.set_title(f"{ylabel} ({claim})" + (f"\n{note}" if note else ""),
                 fontsize=10)
    ax.legend(fontsize=8, loc="best")
  linthresh = min(positive) if positive else 1e-3
  for ax in axes[0]:
    ax.set_xscale("symlog", linthresh=linthresh)
    ax.set_xlim(left=-0.5 * linthresh)      # kappa2 >= 0
  for ax in axes.ravel():
    ax.grid(alpha=0.3)
  seeds = {run_cells.reading_name(reading): sorted(
      {s for g in mine if g.reading == reading for s in g.seeds})
           for reading in readings}
  every = sorted({s for ss in seeds.values() for s in ss})
  if len(every) == 1:
    fig.suptitle(f"{label}: final values, seed {every[0]} (one seed: no "
                 "intervals)")
  else:
    fig.suptitle(f"{label}: final values, mean over seeds (" + "; ".join(
        f"{name}: {', '.join(map(str, ss))}" for name, ss in seeds.items())
                 + "), and paired differences with 95% intervals")
  return fig


def gap_figure(groups, title: str):
  """C and D minus the kappa2 = 0 member's over training, of the members
  averaged over seeds (`seed_mean`); None without that member's curves.

  Fig. 6C-D's claims rest on gaps far smaller than the curves' range: each
  member's seed-averaged curve minus the kappa2 = 0 member's, on a
  symmetric-log axis whose linear band is the minimal effect
  (`stats.MIN_EFFECT`).
  """
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
