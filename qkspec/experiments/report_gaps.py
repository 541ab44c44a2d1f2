"""Entropy and perplexity over training as differences from kappa2 = 0.

Fig. 6C-D's claims rest on gaps far smaller than the curves' range, so
`gap_figure` draws each member's seed-averaged curve minus the kappa2 = 0
member's on a symmetric-log axis whose linear band is the minimal effect
(`report_stats.MIN_EFFECT`).
"""
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

from qkspec.experiments import report_runs  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.experiments import report_stats  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.experiments import training_plots  # pylint: disable=g-import-not-at-top,wrong-import-position

PANELS = (("mean/entropy", "entropy", "attention entropy - kappa2 = 0 (nats)",
           "C"),
          ("valid/ppl", "valid_ppl", "valid perplexity - kappa2 = 0", "D"))


def gap_figure(members, title: str):
  """C and D minus the kappa2 = 0 member's over training; None without
  that member's curves."""
  groups = report_runs.seed_mean(members)
  base = next((m for m in groups if m["kappa1"] > 0 and m["kappa2"] == 0),
              None)
  if base is None or not all(k in base["metrics"] for k, *_ in PANELS):
    return None
  others = [m for m in groups if m is not base]
  names = training_plots.member_names([base] + others)[1:]
  fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
  for ax, (key, quantity, ylabel, claim) in zip(axes, PANELS):
    level = float(base["metrics"][key][1][-1])   # as the verdicts: final
    band = report_stats.min_effect(quantity, level, level)
    ax.axhspan(-band, band, color="0.85", zorder=0,
               label=f"below the minimal effect (±{band:.2g})")
    ax.axhline(0.0, color="0.3", lw=0.8)
    for i, (m, name) in enumerate(zip(others, names)):
      if key in m["metrics"]:
        steps, d = report_stats.step_differences(base["metrics"][key],
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
