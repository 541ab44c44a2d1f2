"""REPRODUCTION.md from training run directories (paper Sec. 7, Figs. 6-12).

`write_report(run_dirs, out_path)` reads the runs (`run_cells`), judges
the claims (`verdicts`, `claims`), opens with the answer (`answer`) and
writes the report with `summary.csv`, `summary.json` and the figures. With
`records_dir` it records each run first (`qkspec.records.store`) and
reports on every record there, so it regenerates without the runs.
"""
import csv
import json
import os
import pathlib

import numpy as np

from qkspec.plots import training_figures
from qkspec.plots import style
from qkspec.records import rundir
from qkspec.records import store
from qkspec.report import answer
from qkspec.report import claims
from qkspec.report import locater_minimum
from qkspec.report import replicates
from qkspec.report import run_cells
from qkspec.report import stats
from qkspec.report import stripes
from qkspec.report import verdicts

DEVIATIONS = (
    "Perplexity: the valid split's, as Fig. 6D (test perplexity: "
    "summary.csv).",
    "Precision: float32 parameters, optimizer state, softmax and loss; the "
    "matmuls in each run's `compute_dtype` (listed under Runs): bfloat16 "
    "(fairseq used FP16 with loss scaling) or float32 at JAX's default "
    "matmul precision (TF32 on recent NVIDIA GPUs); a run whose command sets "
    "`model.loss_logits=compute` also rounds its logits to that dtype "
    "before the float32 softmax (fairseq: FP16 logits before a float32 "
    "log_softmax), and one whose `model.loss_pallas` has \"fa3\" forms its "
    "training logits from float16 operands (FlashAttention-3, "
    "qkspec/kernels/flash_xent.py, as `model.kernels=pallas` does now).",
    "Data blocks: each split is one token stream with one `<eos>` per line "
    "of the WikiText-2 files, cut into blocks of T = 64 tokens as fairseq's "
    "`--sample-break-mode none` (qkspec/data/pipeline.py).",
    "Initialisation: fairseq's scheme (xavier_uniform, gain 1/sqrt(2) for "
    "q, k, v) written with Flax initialisers (qkspec/training/model.py), "
    "not bit-identical to fairseq's PyTorch initialisers.",
    "kappa reading: the paper cannot tell whether kappa multiplies the "
    "penalty next to the mean loss (literal) or next to the summed loss "
    "(fairseq: kappa / 4096 next to the mean); both are reported.",
)


def _steps_line(r):
  k, planned = r["final_step"], r["num_steps"]
  line = f"{k:,} steps run of {planned:,} planned"
  if k < run_cells.PAPER_STEPS:
    line = f"**SHORTENED: {k:,} of {run_cells.PAPER_STEPS:,} steps** ({line})"
  elif k < planned:
    line = f"**stopped early**: {line}"
  return line


def _seed_words(members) -> str:
  """"mean over seeds 0, 1" or "seed 0 (one seed)" of `members`."""
  seeds = sorted({m["seed"] for m in members})
  if len(seeds) == 1:
    return f"seed {seeds[0]} (one seed)"
  return f"mean over seeds {', '.join(map(str, seeds))}"


def figure(rows, label):
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


def _slug(label):
  return label.lower().replace(". ", "").replace(" (", "_").strip(")")


def write_summary(rows, directory, verdicts, spread) -> list[str]:
  """Writes summary.csv and summary.json in `directory`; their paths."""
  os.makedirs(directory, exist_ok=True)
  csv_path = os.path.join(directory, "summary.csv")
  fields = [k for k in rows[0] if not k.endswith("_values")]
  with open(csv_path, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    for r in rows:
      w.writerow({**r, "seeds": " ".join(map(str, r["seeds"])),
                  "run_dirs": " ".join(r["run_dirs"]),
                  "commands": " ; ".join(r["commands"])})
  json_path = os.path.join(directory, "summary.json")
  with open(json_path, "w") as f:
    json.dump(dict(rows=rows, verdicts=verdicts, rerun_spread=spread), f,
              indent=1, default=str)
  return [csv_path, json_path]


_GAP_PANELS = (("mean/entropy", "entropy",
                "attention entropy - kappa2 = 0 (nats)", "C"),
               ("valid/ppl", "valid_ppl", "valid perplexity - kappa2 = 0",
                "D"))


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


def _has_curves(member) -> bool:
  """Does `member` keep a curve (>= 2 steps) of a `fig6_figure` panel?"""
  return any(len(member["metrics"].get(k, ((),))[0]) > 1 for k in (
      "mean/qk_scale", "mean/entropy", "valid/ppl", "valid/loss"))


def _save(fig, png, dpi: int, paths: list[str]) -> None:
  """Draws `fig` to `png` at `dpi`, closes it and adds `png` to `paths`."""
  paths.append(style.save(fig, png, dpi))


def _curves(cell, counted, title, png, rel, paths) -> list[str]:
  """Markdown for the cell's B-D curves over training, drawn to `png`."""
  drawn = [m for m in counted if _has_curves(m)]
  if not drawn:
    return [f"- curves over training: not drawn (the records of "
            f"{len(counted)} member{'s' * (len(counted) > 1)} hold final "
            "values only)"]
  fig = training_figures.fig6_figure(run_cells.seed_mean(drawn),  # B-D
                                   cell[0]["figure"])
  fig.suptitle(f"{title}: over training, {_seed_words(drawn)}")
  _save(fig, png, 90, paths)
  gaps = ""
  fig = gap_figure(drawn, f"{title}: against kappa2 = 0 over "
                               f"training, {_seed_words(drawn)}")
  if fig is not None:
    gap_png = png.with_name(png.name.replace("_curves_", "_gaps_"))
    _save(fig, gap_png, 90, paths)
    gaps = f"; against kappa2 = 0: ![gaps]({rel}/{gap_png.name})"
  skipped = len(counted) - len(drawn)
  if not skipped:
    return [f"- curves over training: ![curves]({rel}/{png.name}){gaps}"]
  return [f"- curves over training of the members that kept them: "
          f"![curves]({rel}/{png.name}){gaps} ({skipped} of {len(counted)} "
          "members not drawn: their records hold final values only)"]


def _rho_maps(run, png, rel, paths) -> list[str]:
  """Fig. 7's rho_i maps of one run to `png`, and its stripe tests."""
  what = f"rho_i over training (`{run['run_dir']}`)"
  if any(k in m["metrics"] for m in run["members"]
         for k in rundir.rho_keys(0)):
    fig = training_figures.rho_heatmap_figure(run["members"])
    _save(fig, png, 110, paths)
    md = [f"- {what}: ![rho]({rel}/{png.name})"]
  else:
    md = [f"- {what}: not drawn (the record keeps the stripe test's results, "
          "not the rho maps)"]
  return md + [f"  - {name}: {stripes.describe(result)}"
               for name, result in claims.rho_stripes(run["members"])]


def _figures_dir(out_path, figures_dir=None) -> pathlib.Path:
  """`figures_dir`, by default `reproduction/` next to `out_path`."""
  return pathlib.Path(figures_dir or pathlib.Path(out_path).parent
                      / "reproduction")


def default_records_dir(out_path, figures_dir=None) -> str:
  """`records/` in the figures' directory (`_figures_dir`)."""
  return str(_figures_dir(out_path, figures_dir) / "records")


def keep_records(run_dirs, records_dir, replicate_dirs=()
                 ) -> tuple[list[str], list[str]]:
  """Records the runs in `records_dir`; (run, replicate) records there."""
  for role, dirs in (("run", run_dirs), ("replicate", replicate_dirs)):
    names = [store.name_of(store.origin(d)) for d in dirs]
    if len(set(names)) < len(names):
      raise ValueError(f"two {role} directories share a name ({names}): a "
                       "record is named after its run directory's basename.")
    for d in dirs:
      config = run_cells.load_config(d)
      command = run_cells.config_command(config, store.origin(d))
      store.write(d, records_dir, run_cells.record_keys(config),
                        role, command=command)
  return (store.listed(records_dir, "run"),
          store.listed(records_dir, "replicate"))


def _spread(runs, replicate_dirs) -> dict:
  """`replicates.by_reading` of the replicates (and spreads records kept)."""
  kept = [store.read(d).get("spread") for d in replicate_dirs]
  loaded = run_cells.load_runs(
      [d for d, s in zip(replicate_dirs, kept) if s is None])
  quantities = [(n, k) for n, k, _ in run_cells.QUANTITIES]
  return replicates.by_reading(runs, loaded, quantities,
                               {r["reading"] for r in runs},
                               [s for s in kept if s is not None])


def write_report(run_dirs, out_path, figures_dir=None, command=None,
                 replicate_dirs=(), records_dir=None) -> list:
  """Writes `out_path` (markdown), the summary and figures; their paths.

  `replicate_dirs`: runs repeating a run of `run_dirs` (same config and
  seed). `records_dir`: record the runs there and report on every record
  it holds. `command`: the launch/report.py command it names (by default
  the one that writes `out_path` from these runs or records).
  """
  out_path = pathlib.Path(out_path)
  figures_dir = _figures_dir(out_path, figures_dir)
  if command is None:
    flags = [] if records_dir else [
        f"--{flag} {','.join(map(str, dirs))}" for flag, dirs in
        (("runs", run_dirs), ("replicates", replicate_dirs)) if dirs]
    command = " ".join(["python launch/report.py", *flags,
                        f"--out {out_path}"])
  if records_dir is not None:
    run_dirs, replicate_dirs = keep_records(run_dirs, records_dir,
                                            replicate_dirs)
    if not run_dirs:
      raise ValueError(f"no run records in {records_dir}: give run "
                       "directories (launch/report.py --runs).")
  runs = run_cells.load_runs(run_dirs)
  rows = run_cells.summarize_runs(runs)
  if not rows:
    raise ValueError("no members found in the run directories.")
  spread = _spread(runs, replicate_dirs)
  by_cell = run_cells.cells(runs)
  members = {k: run_cells.cell_members(c)[0] for k, c in by_cell.items()}
  vs = locater_minimum.annotate(verdicts.verdicts(rows, members),
                                rows)
  stripe_vs = claims.stripe_verdicts(runs)
  trends = verdicts.trends(rows)
  paths = write_summary(rows, figures_dir, vs + stripe_vs + trends, spread)
  rel = os.path.relpath(figures_dir, out_path.parent)
  records = ("" if records_dir is None else
             f" from the run records in `{records_dir}`")
  md = ["# Reproduction: language-model claims (Sec. 7, Figs. 6-12)", "",
        f"Generated by `{command}`{records}; do not edit by hand. Every "
        "group's values: "
        f"[{rel}/summary.csv]({rel}/summary.csv), "
        f"[{rel}/summary.json]({rel}/summary.json).", "", "## Answer", ""]
  md += answer.answer(vs, stripe_vs, trends) + [""]
  md += answer.verdict_table(vs) + ["", answer.legend()]
  md += ["", "## How a verdict is reached", ""]
  md += answer.rules(verdicts.seed_reference(rows))
  md += ["", "## Every verdict", ""] + answer.detail_table(vs)
  md += [""] + [f"- {v['text']}" for v in stripe_vs]
  if trends:
    md += ["", "## kappa2 as a curve (Fig. 6C-D)", "",
           "The slope of each metric against log10 kappa2 over kappa2 > 0, "
           "and the best kappa2 > 0 against kappa2 = 0, its interval or "
           "floor at the Bonferroni level for the kappa2 it was chosen "
           "from (the rules above otherwise):", ""]
    md += answer.kappa2_table(trends)
  md += [""] + locater_minimum.markdown(rows, run_cells.READINGS)
  md += ["", "## Figures", ""]
  for label in sorted({r["label"] for r in rows}, key=run_cells.label_order):
    md += [f"### {label}", ""]
    locater = any(r["label"] == label and r["kappa1"] > 0 for r in rows)
    if locater and not label.startswith("Fig. 7"):   # Fig. 7: heat maps
      fig = figure(rows, label)       # (its kappa1 > 0 groups against kappa2)
      png = figures_dir / f"{_slug(label)}.png"
      _save(fig, png, 110, paths)
      md += [f"![{label}]({rel}/{png.name})", ""]
    for reading in sorted({r["reading"] for r in rows if r["label"] == label}):
      cell = by_cell[(label, reading)]
      name = run_cells.reading_name(reading)
      counted, left_out = run_cells.cell_members(cell)
      if left_out:
        md.append(f"- {name}: left out (stopped before step "
                  f"{max(m['last_step'] for m in counted):,}): " + ", ".join(
                      f"seed {m['seed']}, kappa2 = {m['kappa2']:g} at step "
                      f"{m['last_step']:,}" for m in left_out))
      png = figures_dir / f"{_slug(label)}_curves_{reading}.png"
      md += [f"- {name}, " + line[2:] for line in _curves(
          cell, counted, f"{label}, {name}", png, rel, paths)]
      for i, run in enumerate(cell):
        if run["figure"] == "7" and "shared_from" not in run:  # rho maps
          png = figures_dir / f"{_slug(label)}_rho_{reading}_{i}.png"
          md += _rho_maps(run, png, rel, paths)
    md.append("")
  md += ["## Still to run", "",
         "Each with the command that trains it (add "
         "`--config.data.manual_dir=DIR` where WikiText-2 cannot be "
         "downloaded; on a GPU `python bench/gpu_figures.py`); a run "
         "resumes with the same command, and `python launch/report.py "
         "--runs DIR` adds it here:", ""]
  md += claims.still_to_run(rows) or [
      "- nothing: every figure has both readings at full length with the "
      "planned seeds."]
  md += ["", "## Same config, same seed, run twice", "",
         "Two GPU runs of one config and seed are not bit-identical "
         "(XLA's GPU scatter-adds and some reductions may sum in another "
         "order); the largest relative difference of the final values, "
         "per reading of kappa (which pairs: summary.json):", ""]
  titles = {n: t for n, _, t in run_cells.QUANTITIES}
  md += [replicates.markdown(s, titles, run_cells.reading_name(reading))
         for reading, s in spread.items()] or [replicates.markdown({}, {})]
  md += [""]
  md += ["## Runs", "",
         "Device and wall time from each run's `run_info.jsonl`.", ""]
  listed = set()
  for run in sorted(runs, key=lambda r: run_cells.label_order(r["label"])):
    if run["run_dir"] in listed:   # both readings' halves: one program
      continue
    listed.add(run["run_dir"])
    reading = ("both readings side by side" if run["both_readings"]
               else run_cells.reading_name(run["reading"]))
    info = (run_cells.run_info(run["path"])
            or "device and wall time not recorded")
    md.append(f"- {run['label']}, {reading}: {_steps_line(run)}; {info}; "
              f"`{run['command']}`")
  md += ["", "## Why this may differ from the paper", ""]
  target = locater_minimum.target_line(rows, run_cells.READINGS)
  md += [f"- {d}" for d in ((target,) if target else ()) + DEVIATIONS]
  out_path.parent.mkdir(parents=True, exist_ok=True)
  out_path.write_text("\n".join(md) + "\n")
  return [str(out_path)] + paths
