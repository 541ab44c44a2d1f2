r"""Dong et al.'s trained-network experiments: short paths and removed skips.

Shapes: S = seeds, L = layers, H = heads, K = L + 1 path lengths.

Per task (`qkspec.data.synthetic`) and skip-SAN variant: (1) short paths
carry the network (Dong et al., Sec. 5.2, Fig. 4): accuracy on paths of
length <= k beside the path fractions, `recovered_k2` = :math:`(a_{\le 2}
- a_0)/(a_{full} - a_0)`; (2) rank collapse without skips (Sec. 5.1),
trained and at init; (3) this paper's question: each layer's accuracy lost
without its attention beside its QK-eigenspectrum, and Spearman's
correlation of that drop with :math:`\xi` and :math:`\eta`.

References:
  Dong, Cordonnier, Loukas, Attention is Not All You Need: Pure Attention
  Loses Rank Doubly Exponentially with Depth, ICML 2021, arXiv:2103.03404.
"""
# pylint: disable=invalid-name
from absl import logging
import jax
import ml_collections
import numpy as np

from qkspec.data import synthetic
from qkspec.experiments import dong_measure
from qkspec.experiments import outputs
from qkspec.plots import style
from qkspec.plots import training_figures
from qkspec.theory import san_paths

INT_FIELDS = {"num_seeds": 1, "num_layers": 1, "num_heads": 1, "d_model": 1,
              "mlp_dim": 1, "seq_len": 2, "vocab_size": 2, "batch_size": 1,
              "num_memorized": 1, "eval_sequences": 1, "num_steps": 1,
              "seed": 0}


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad field of a dong_trained config."""
  outputs.require_ints(config, INT_FIELDS)
  outputs.require_subset(config, "tasks", synthetic.TASKS)
  outputs.require_subset(config, "variants", dong_measure.VARIANTS)
  outputs.require(config.d_model % config.num_heads == 0, "num_heads",
                  "must divide d_model", config.num_heads)
  outputs.require_positive(config, "lr")
  outputs.require_temperature(config)


def spearman(a: np.ndarray, b: np.ndarray) -> float:
  """Spearman's rank correlation (no ties expected); NaN below 3 points."""
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
    return float("nan")
  ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
  return float(np.corrcoef(ra, rb)[0, 1])


def _ms(x: np.ndarray) -> tuple[float, float]:
  return float(np.mean(x)), float(np.std(x))


def tables(results: dict, config) -> dict[str, list[dict]]:
  """Path, rank-collapse, per-layer and summary rows from the measurements."""
  L, H = config.num_layers, config.num_heads
  frac_K = san_paths.path_length_fractions(L, H)
  paths, ranks, layers, summary = [], [], [], []
  for (task, variant), m in results.items():
    key = dict(task=task, variant=variant)
    full_acc, full_std = _ms(m["full_acc"])
    for k in range(L + 1):
      acc, acc_std = _ms(m["acc_k"][:, k])
      loss, loss_std = _ms(m["loss_k"][:, k])
      paths.append(dict(**key, max_length=k, path_fraction=float(frac_K[k]),
                        cum_path_fraction=float(frac_K[:k + 1].sum()),
                        acc=acc, acc_std=acc_std, loss=loss,
                        loss_std=loss_std, full_acc=full_acc,
                        chance=1.0 / config.vocab_size))
    for name in m:
      if name.startswith("rel_res/"):
        _, when, arch = name.split("/")
        for l in range(L + 1):
          r, r_std = _ms(m[name][:, l])
          ranks.append(dict(**key, weights=when, eval_arch=arch, layer=l,
                            rel_res=r, rel_res_std=r_std))
    drop_SxL = m["full_acc"][:, None] - m["knockout_acc"]
    spec = {k: m[f"spectrum/trained/{k}"].mean(axis=(0, 2))
            for k in ("trace", "scale", "xi", "eta")}
    spec.update({f"{k}_init": m[f"spectrum/init/{k}"].mean(axis=(0, 2))
                 for k in ("xi", "eta")})
    for l in range(L):
      layers.append(dict(**key, layer=l,
                         knockout_drop=float(drop_SxL[:, l].mean()),
                         knockout_drop_std=float(drop_SxL[:, l].std()),
                         **{k: float(v[l]) for k, v in spec.items()}))
    acc_K = m["acc_k"].mean(0)
    gain = acc_K[-1] - acc_K[0]
    summary.append(dict(
        **key, full_acc=full_acc, full_acc_std=full_std,
        acc_k0=float(acc_K[0]), acc_k1=float(acc_K[1]),
        acc_k2=float(acc_K[min(2, L)]),
        recovered_k2=float((acc_K[min(2, L)] - acc_K[0]) / gain)
        if gain > 0 else float("nan"),
        paths_k_le_2=float(frac_K[:3].sum()),
        chance=1.0 / config.vocab_size,
        no_skip_rel_res_last=float(m["rel_res/trained/no_skip"][:, -1].mean()),
        as_trained_rel_res_last=float(
            m["rel_res/trained/as_trained"][:, -1].mean()),
        spearman_drop_xi=spearman(drop_SxL.mean(0), spec["xi"]),
        spearman_drop_eta=spearman(drop_SxL.mean(0), spec["eta"])))
  return dict(path_eval=paths, rank_trained=ranks, layer_spectra=layers,
              summary=summary)


def plot_paths(rows, config, workdir):
  """Accuracy vs max path length k per task, path fractions as bars."""
  tasks = list(config.tasks)
  fig, axes = style.subplots(1, len(tasks), (5.5 * len(tasks), 4))
  for ax, task in zip(axes[0], tasks):
    k_K = np.arange(config.num_layers + 1)
    frac = [r["path_fraction"] for r in rows
            if r["task"] == task and r["variant"] == config.variants[0]]
    bars = ax.twinx()
    bars.bar(k_K, frac, color="0.85", width=0.6, zorder=0)
    bars.set_ylabel("fraction of paths of length k")
    ax.set_zorder(bars.get_zorder() + 1)
    ax.patch.set_visible(False)
    for i, variant in enumerate(config.variants):
      sel = [r for r in rows if r["task"] == task and r["variant"] == variant]
      line = ax.errorbar(k_K, [r["acc"] for r in sel],
                         yerr=[r["acc_std"] for r in sel], marker="os"[i % 2],
                         capsize=3, label=f"{variant}: paths of length <= k")
      ax.axhline(sel[0]["full_acc"], color=line[0].get_color(), ls="--",
                 lw=1, label=f"{variant}: all paths (full network)")
    ax.axhline(1.0 / config.vocab_size, color="k", ls=":", lw=1,
               label="chance")
    ax.set(xlabel="max path length k (attention layers used)",
           ylabel="token accuracy", title=task, ylim=(0, 1.02))
    ax.legend(fontsize=7, loc="upper left")
  fig.suptitle(f"Trained skip SANs restricted to short paths (L="
               f"{config.num_layers}, H={config.num_heads}, d="
               f"{config.d_model}, T={config.seq_len}; mean ± std over "
               f"{config.num_seeds} seeds)", fontsize=10)
  return style.save_figure(fig, workdir, "fig_paths_trained")


FLOOR = 1e-8   # relative residuals below this (exact 0 included) are drawn here


def plot_rank(rows, config, workdir):
  """Relative residual by layer: trained (solid) and init (dashed)."""
  combos = [(t, v) for t in config.tasks for v in config.variants]
  fig, axes = style.subplots(1, len(combos), (4.5 * len(combos), 3.8),
                             sharey=True)
  archs = list(dong_measure.EVAL_ARCHS)
  colors = style.colors("tab10", np.arange(len(archs)))
  for ax, (task, variant) in zip(axes[0], combos):
    curves = []                       # in legend order, numbered from 1
    for color, arch in zip(colors, archs):
      for when, ls in (("trained", "-"), ("init", "--")):
        sel = [r for r in rows if (r["task"], r["variant"], r["eval_arch"],
                                   r["weights"]) == (task, variant, arch, when)]
        curves.append([max(r["rel_res"], FLOOR) for r in sel])
        ax.semilogy([r["layer"] for r in sel], curves[-1], ls, color=color,
                    label=f"{len(curves)}: {arch} ({when})"
                    if ax is axes[0, 0] else None)
    note = training_figures.coincide_note(curves, log=True)
    ax.set(xlabel="layer l", ylim=(FLOOR, 2))
    ax.set_title(f"{task}, {variant}" + (f"\n{note}" if note else ""),
                 fontsize=9 if note else None)
  axes[0, 0].set_ylabel(r"$\|\mathrm{res}(X^l)\| / \|X^l\|$ "
                        f"(below {FLOOR:g} drawn at {FLOOR:g})")
  fig.legend(fontsize=7, loc="outside right upper")
  fig.suptitle("Rank collapse of trained SANs with skips / MLPs removed at "
               "evaluation (solid: trained, dashed: init)", fontsize=10)
  return style.save_figure(fig, workdir, "fig_rank_trained")


def run(config: ml_collections.ConfigDict, workdir: str) -> dict:
  """Trains every (task, variant), measures, writes tables and figures."""
  workdir, written = outputs.start_run(config, workdir, validate)
  results = {}
  for task in config.tasks:
    for variant in config.variants:
      logging.info("dong_trained: training %s / %s (%d seeds, %d steps)",
                   task, variant, config.num_seeds, config.num_steps)
      params, init, tc = dong_measure.train(config, task, variant,
                                            str(workdir))
      with outputs.heartbeat(f"dong_trained: measuring {task}/{variant}"):
        results[(task, variant)] = jax.tree.map(
            np.asarray, dong_measure.measure(params, init, tc))
  rows = tables(results, config)
  written += outputs.write_tables(rows, workdir)
  cols = ["task", "variant", "full_acc", "acc_k0", "acc_k1", "acc_k2",
          "recovered_k2", "paths_k_le_2", "as_trained_rel_res_last",
          "no_skip_rel_res_last", "spearman_drop_xi", "spearman_drop_eta"]
  text = outputs.format_table(rows["summary"], cols)
  layer_text = outputs.format_table(rows["layer_spectra"], [
      "task", "variant", "layer", "knockout_drop", "trace", "scale", "xi",
      "eta", "xi_init", "eta_init"])
  print("dong_trained (token accuracy; acc_kK: paths of length <= K; "
        "recovered_k2: share of the gain over k = 0 recovered by k <= 2; "
        "rel_res_last: ||res(X^L)||/||X^L||):\n" + text + "\n\nper layer "
        "(knockout_drop: accuracy lost without that layer's attention):\n"
        + layer_text, flush=True)
  written.append(plot_paths(rows["path_eval"], config, workdir))
  written.append(plot_rank(rows["rank_trained"], config, workdir))
  outputs.log_outputs("dong_trained", written)
  return dict(raw=results, **rows, paths=written)
