"""Figures of a training workdir (paper Figs. 6-7 and App. D Figs. 8-12).

Reads `<workdir>/members.json` and each member's `metrics.jsonl`
(`qkspec.training.loop.train_and_evaluate`) and writes PNGs into the workdir:

* `fig6_curves.png`: eigenspectrum scale tr(W_QK^T W_QK) (Fig. 6B),
  attention entropy (6C) and valid perplexity (6D; valid loss for the
  theory task) against the step, one line per member (coloured by kappa2);
* `fig6_vs_kappa2.png`: the same three at the last step against kappa2
  (symlog axis, so kappa2 = 0 shows);
* `rho_heatmap.png`: Fig. 7, empirical rho_i of the last query per key
  position i (vertical) and step (horizontal), one panel per member;
* `training_curves.png`: train/valid loss, tr(W_QK), eigen-variance (Eq. 8)
  and Dong's rank-collapse residual per layer.

Layers are averaged for the Fig. 6 panels (`mean/...`); the heat map shows
`layer` (default 0, head 0).
"""
import json
import os

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from qkspec.training import metric_writer  # pylint: disable=g-import-not-at-top,wrong-import-position


def load_members(workdir: str) -> list[dict]:
  """members.json entries, each with its `metrics` ({name: (steps, values)})."""
  with open(os.path.join(workdir, "members.json")) as f:
    members = json.load(f)
  for m in members:
    m["metrics"] = metric_writer.read_metrics(os.path.join(workdir, m["dir"]))
  return members


def _colors(members):
  cmap = plt.get_cmap("viridis")
  n = max(len(members) - 1, 1)
  order = np.argsort([m["kappa2"] for m in members], kind="stable")
  colors = [None] * len(members)
  for rank, i in enumerate(order):
    colors[i] = cmap(rank / n)
  return colors


def _perplexity_key(metrics):
  return "valid/ppl" if "valid/ppl" in metrics else "valid/loss"


def _label(m):
  return (f"$\\kappa_1$={m['kappa1']:g}, $\\kappa_2$={m['kappa2']:g}"
          + (f", target {m['target']:g}" if m.get("target", 1.0) != 1.0
             else "")
          + (f", seed {m['seed']}" if m.get("seed") else ""))


def plot_fig6(members, path):
  """Fig. 6 B-D against the step."""
  keys = [("mean/qk_scale", r"scale tr$(W_{QK}^\top W_{QK})$", True),
          ("mean/entropy", "attention entropy (nats)", False),
          (_perplexity_key(members[0]["metrics"]), "valid perplexity"
           if "ppl" in _perplexity_key(members[0]["metrics"]) else
           "valid loss", True)]
  fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
  for ax, (key, title, log) in zip(axes, keys):
    for m, c in zip(members, _colors(members)):
      if key in m["metrics"]:
        steps, vals = m["metrics"][key]
        ax.plot(steps, vals, color=c, label=_label(m),
                marker="o" if len(steps) < 20 else None, markersize=3)
    ax.set_title(title)
    ax.set_xlabel("step")
    if log:
      ax.set_yscale("log")
  axes[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_vs_kappa2(members, path):
  """Last-step Fig. 6 B-D values against kappa2."""
  last = _perplexity_key(members[0]["metrics"])
  keys = [("mean/qk_scale", "final scale"), ("mean/entropy", "final entropy"),
          (last, "final valid " + ("perplexity" if "ppl" in last else "loss"))]
  k2 = np.array([m["kappa2"] for m in members])
  fig, axes = plt.subplots(1, 3, figsize=(12, 3.5))
  for ax, (key, title) in zip(axes, keys):
    vals = [m["metrics"][key][1][-1] if key in m["metrics"] else np.nan
            for m in members]
    ax.plot(k2, vals, "o")
    for x, y, m in zip(k2, vals, members):
      if m["kappa1"] == 0:
        ax.annotate("no LocATER", (x, y), fontsize=7)
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_xlabel(r"$\kappa_2$")
    ax.set_title(title)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_rho_heatmap(members, path, layer=0, head=None):
  """Fig. 7: rho_i (color) per key position i and step."""
  name = f"l{layer}/rho" if head is None else f"l{layer}/h{head}/rho"
  shown = [m for m in members if name in m["metrics"]]
  if not shown:
    name = f"l{layer}/h0/rho"
    shown = [m for m in members if name in m["metrics"]]
  fig, axes = plt.subplots(1, len(shown), figsize=(5 * len(shown), 4),
                           squeeze=False)
  for ax, m in zip(axes[0], shown):
    steps, rho_SxT = m["metrics"][name]
    T = rho_SxT.shape[1]
    im = ax.imshow(rho_SxT.T, aspect="auto", origin="lower", vmin=0, vmax=1,
                   cmap="magma", interpolation="nearest",
                   extent=(steps[0], steps[-1], 0.5, T + 0.5))
    ax.set_xlabel("step")
    ax.set_ylabel("key position i (query = last token)")
    ax.set_title(_label(m), fontsize=9)
  fig.colorbar(im, ax=axes[0].tolist(), label=r"empirical $\rho_i$")
  fig.savefig(path, dpi=120)
  plt.close(fig)


def plot_curves(members, path):
  """Loss, tr(W_QK), eigen-variance and rank residual per layer."""
  first = members[0]["metrics"]
  layers = sorted({k.split("/")[0] for k in first if k[0] == "l"
                   and k.split("/")[0][1:].isdigit()})
  panels = [("train/loss", "train loss"), (_perplexity_key(first), "valid")]
  panels += [(f"{l}/qk_trace", f"{l} tr(W_QK)") for l in layers[:1]]
  panels += [("mean/qk_trace", "mean tr(W_QK)"),
             ("mean/eigen_variance", "eigen-variance (Eq. 8)")]
  panels += [(f"{l}/rank_residual", f"{l} rank residual") for l in layers]
  fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.2),
                           squeeze=False)
  for ax, (key, title) in zip(axes[0], panels):
    for m, c in zip(members, _colors(members)):
      if key in m["metrics"]:
        ax.plot(*m["metrics"][key], color=c, label=_label(m))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step")
  axes[0][0].legend(fontsize=6)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def plot_workdir(workdir: str, layer: int = 0) -> list[str]:
  """Writes every figure of `workdir`; returns their paths."""
  members = load_members(workdir)
  out = {k: os.path.join(workdir, k + ".png") for k in
         ("fig6_curves", "rho_heatmap", "training_curves", "fig6_vs_kappa2")}
  plot_fig6(members, out["fig6_curves"])
  plot_rho_heatmap(members, out["rho_heatmap"], layer)
  plot_curves(members, out["training_curves"])
  if len({m["kappa2"] for m in members}) > 1:
    plot_vs_kappa2(members, out["fig6_vs_kappa2"])
  else:
    del out["fig6_vs_kappa2"]
  return list(out.values())
