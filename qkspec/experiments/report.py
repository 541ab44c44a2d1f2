"""REPRODUCTION.md from training run directories (paper Sec. 7, Figs. 6-12).

`write_report(run_dirs, out_path)` reads each workdir of
`qkspec.training.loop.train_and_evaluate` (`config.json`, `members.json` and
the members' `metrics.jsonl`, through `training_plots.load_members`) and
writes the report and, beside it, `summary.csv`, `summary.json` and one
figure per paper figure (final scale, entropy and valid perplexity against
kappa2, mean +- std over seeds, one line per reading of kappa).

* `summarize(run_dirs)`: one row per paper figure, reading of kappa and
  member group (members that differ only in seed), over every run of that
  figure and reading (`cell_members`: the seeds may be one program's,
  `seeds=N`, or separate runs', `seed=S`; a seed met twice counts once, and
  members stopped before the cell's longest run are left out and named):
  kappa1, kappa2, the seeds, the commands that trained them, steps run
  and planned, and mean / std over seeds of the final valid and test
  perplexity, scale tr(W_QK^T W_QK), trace tr(W_QK) and attention entropy
  (layers averaged, `mean/...`).
* `verdicts(rows)`: per figure and reading, the paper's claims B (scale
  shrinks), C (entropy higher) and D (perplexity lower) for kappa2 = 0 -> 1
  (kappa1 > 0), and for no LocATER (kappa1 = kappa2 = 0) -> LocATER where a
  run has that member: "reproduced", "reversed" or "not significant" (the
  difference of the means is within 2 x the pooled std over seeds). With
  one seed the sign decides and the line says "one seed: no error bar",
  unless replicate runs (`write_report(..., replicate_dirs)`: the same
  config and seed trained again) show a run-to-run spread as large as the
  difference (`replicates`): then it is "not significant" too.
* `seed_mean(members)`: members that differ only in seed merged into one,
  each metric averaged over the seeds at their common steps; the report
  draws these as the curves over training (the paper's panels B-D against
  the update, `training_plots.fig6_figure`), one line per member group.
* `still_to_run(rows)`: the cells of the plan (every figure x both
  readings; 3 seeds for Fig. 6, 1 elsewhere; 50,000 steps) that no run
  covers yet, each with the `bench/gpu_paper.py` command that adds it;
  `todo_runs(rows)` the same runs one by one, in the order a GPU slice
  trains them (summary.json's "todo", `gpu_paper.py --stages todo`).

The section "LocATER's own minimum" (`locater_minimum.markdown`) sets
each LocATER group's trained trace and scale beside W* = cI, where the
penalty alone would put W_QK, and says which groups sit there.

A no-LocATER member (kappa1 = kappa2 = 0) trains bit for bit the same under
both readings, so `cells` counts it in both (tests/readings_test.py).

Fig. 7's heat maps get a stripe test per member (`stripes.stripe_test`: a
persistent, salient position profile of rho_i over training) and
`stripe_verdicts(runs)` a verdict line per reading: stripes with LocATER
and none without, over every seed.

`write_report(..., records_dir=...)` (launch/report.py's default) first
records each run (`run_records`: what this module reads of it, small
enough to commit) and then reports on every record in `records_dir`, so a
report made from runs on machines that are gone can still be regenerated
and extended. A record rebuilt from an earlier report may hold final
values only: its curves and rho maps are then the earlier report's PNGs
when they are still there (`_earlier_figure`), its stripe tests the ones
that report printed, and a replicate's spread the one it measured.

The paper figure comes from the config: the two members of
configs/rho_training.py (kappa1 = 100, kappa2 = 1 and none, kappa1 = kappa2
= 0) are Fig. 7; otherwise (num_layers, d) picks Figs. 6, 8-12 (smoke
runs: d is the paper's d / 8, and the label says "smoke").
"""
import csv
import json
import math
import os
import pathlib

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from qkspec.experiments import locater_minimum  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.experiments import replicates  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.experiments import run_records  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.experiments import stripes  # pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.experiments import training_plots  # pylint: disable=g-import-not-at-top,wrong-import-position

PAPER_STEPS = 50_000
FIGURES = {(1, 128): "6", (1, 32): "8", (3, 32): "9", (6, 32): "10",
           (3, 128): "11", (6, 128): "12"}          # (L, d) -> paper figure
QUANTITIES = (("valid_ppl", "valid/ppl", "valid ppl"),
              ("test_ppl", "test/ppl", "test ppl"),
              ("scale", "mean/qk_scale", "scale tr(W^T W)"),
              ("trace", "mean/qk_trace", "trace tr(W)"),
              ("entropy", "mean/entropy", "entropy (nats)"))
# claim: (quantity, sign the paper expects for LocATER-stronger minus weaker)
CLAIMS = (("B", "scale", -1, "scale shrinks"),
          ("C", "entropy", +1, "entropy higher"),
          ("D", "valid_ppl", -1, "valid perplexity lower"))
# figure -> seeds the report asks for under each reading (issue: >= 3 seeds
# for Fig. 6, >= 1 elsewhere)
PLAN = {"6": 3, "7": 1, "8": 1, "9": 1, "10": 1, "11": 1, "12": 1}
READINGS = {k: f"{name} ({k})"       # "literal (mean_loss)", ...
            for k, name in training_plots.READING_NAMES.items()}
DEVIATIONS = (
    "Precision: float32 parameters, optimizer state, softmax and loss; the "
    "matmuls in each run's `compute_dtype` (listed under Runs): bfloat16 "
    "(fairseq used FP16 with loss scaling) or float32 at JAX's default "
    "matmul precision (TF32 on recent NVIDIA GPUs); a run whose command sets "
    "`model.loss_logits=compute` also rounds its logits to that dtype "
    "before the float32 softmax (fairseq: FP16 logits before a float32 "
    "log_softmax), and one whose `model.loss_pallas` has \"fa3\" forms its "
    "training logits from float16 operands (FlashAttention-3, "
    "qkspec/training/flash_forward.py).",
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
_REPO = pathlib.Path(__file__).resolve().parents[2]


def _load_config(run_dir):
  with open(os.path.join(run_dir, "config.json")) as f:
    return json.load(f)


def figure_of(config: dict) -> tuple[str, bool]:
  """(paper figure id, smoke?) of a run's config.json dict."""
  smoke = config.get("data", {}).get("name") == "synthetic"
  sweep = config.get("sweep", {})
  pairs = set(zip(sweep.get("kappa1") or (), sweep.get("kappa2") or ()))
  if pairs == {(100.0, 1.0), (0.0, 0.0)}:     # configs/rho_training.py
    return "7", smoke
  model = config["model"]
  d = model["d_model"] * (8 if smoke else 1)
  return FIGURES.get((model["num_layers"], d),
                     f"L={model['num_layers']},d={model['d_model']}"), smoke


def config_command(config: dict, run_dir: str) -> str:
  """The launch command that rebuilds `config` (config file, arg, overrides).

  The config file and argument follow from the figure, reading, seeds and
  smoke; every field where config.json differs from what that file gives
  becomes a `--config.x=y` override.
  """
  fig, smoke = figure_of(config)
  parts = []
  if fig == "7":
    name = "rho_training"
  elif fig == "6":
    name = "locater_wt2"
  else:
    name = "depth_width"
    d = config["model"]["d_model"] * (8 if smoke else 1)
    parts += [f"L={config['model']['num_layers']}", f"d={d}"]
  sweep = config.get("sweep", {})
  seeds = set(sweep.get("seed") or ())
  if len(seeds) > 1:
    parts.append(f"seeds={len(seeds)}")
  elif config.get("seed"):
    parts.append(f"seed={config['seed']}")     # one seed alone
  if fig != "7" and 0.0 in (sweep.get("kappa1") or ()):
    parts.append("contrast")                   # a no-LocATER member
  elif (fig != "7" and not sweep.get("kappa1") and not sweep.get("kappa2")
        and config["locater"]["kappa1"] == 0
        and config["locater"]["kappa2"] == 0):
    parts.append("none")                       # that member alone

  if sweep.get("penalty_added_to"):
    parts.append("both_readings")              # side by side, one program
  elif config["locater"].get("penalty_added_to") == "summed_loss":
    parts.append("fairseq")
  if smoke:
    parts.append("smoke")
  arg = ",".join(parts)
  path = f"configs/{name}.py" + (f":{arg}" if arg else "")
  overrides = []
  try:
    # pylint: disable=g-import-not-at-top
    from qkspec.config import args as args_lib
    base = json.loads(args_lib.load_config_file(
        _REPO / "configs" / f"{name}.py", arg).to_json())
    overrides = [f"--config.{k}={_flag_value(v)}"
                 for k, v in _diff(base, config)]
  except (ValueError, OSError, KeyError) as e:
    path += f" (not rebuilt exactly: {e})"
  return " ".join(["python launch/train.py", f"--config {path}", *overrides,
                   f"--workdir {run_dir}"])


def _diff(base, new, prefix=""):
  out = []
  for k, v in new.items():
    key = f"{prefix}{k}"
    if isinstance(v, dict) and isinstance(base.get(k), dict):
      out += _diff(base[k], v, key + ".")
    elif base.get(k, object()) != v:
      out.append((key, v))
  return out


def _flag_value(v):
  if isinstance(v, (list, tuple)):
    return '"(' + ", ".join(repr(x) for x in v) + (",)" if len(v) == 1
                                                    else ')"')
  return repr(v) if isinstance(v, str) and not v else str(v)


def _mean_std(vals):
  vals = np.asarray([v for v in vals if np.isfinite(v)], float)
  if not vals.size:
    return math.nan, math.nan
  return float(vals.mean()), (float(vals.std(ddof=1)) if vals.size > 1
                              else math.nan)


def _seed_groups(members) -> dict:
  """(kappa1, kappa2, target) -> the members that differ only in seed."""
  groups = {}
  for m in members:
    groups.setdefault((m["kappa1"], m["kappa2"], m["target"]), []).append(m)
  return groups


def _last_step(member) -> int:
  """The member's last training step: train/loss's, else (a record that
  kept final values only) the last step of any metric; 0 if none."""
  metrics = member["metrics"]
  loss = metrics.get("train/loss")
  if loss is not None and len(loss[0]):
    return int(loss[0][-1])
  return max((int(s[-1]) for s, _ in metrics.values() if len(s)), default=0)


def load_runs(run_dirs) -> list[dict]:
  """One dict per run dir and reading of kappa: its figure, reading,
  command, members (with their last step) and the steps run and planned.

  A run that trained both readings side by side (`both_readings`:
  members.json names each member's "penalty_added_to") gives one dict
  per reading, each with that reading's members and `both_readings` set.
  A record (`run_records`) loads as the run it came from: `run_dir` names
  that run, `path` where it was read.
  """
  runs = []
  for path in run_dirs:
    config = _load_config(path)
    fig, smoke = figure_of(config)
    reading = config["locater"].get("penalty_added_to", "mean_loss")
    run_dir = run_records.origin(path)
    by_reading = {}
    for m in training_plots.load_members(path):
      m["last_step"] = _last_step(m)
      by_reading.setdefault(m.get("penalty_added_to", reading), []).append(m)
    run = dict(run_dir=run_dir, path=str(path), figure=fig, smoke=smoke,
               label=f"Fig. {fig}" + (" (smoke)" if smoke else ""),
               both_readings=len(by_reading) > 1,
               command=config_command(config, run_dir),
               d_model=int(config["model"]["d_model"]),
               num_steps=int(config["num_steps"]))
    for member_reading, members in (by_reading or {reading: []}).items():
      runs.append(dict(
          run, reading=member_reading, members=members,
          final_step=min((m["last_step"] for m in members), default=0)))
  return runs


def _no_locater(member) -> bool:
  return member["kappa1"] == 0 and member["kappa2"] == 0


def cells(runs) -> dict:
  """(label, reading) -> the runs of that figure and reading of kappa.

  A no-LocATER member (kappa1 = kappa2 = 0) trains bit for bit the same
  under either reading (the factor multiplies a zero penalty;
  tests/readings_test.py), so it also joins the other reading's cell: as a
  view of its run holding just those members, with `shared_from` naming
  the run's own reading, after that cell's own runs (`cell_members` counts
  a member met twice once, the cell's own first)."""
  out = {}
  for run in runs:
    out.setdefault((run["label"], run["reading"]), []).append(run)
  for run in runs:
    shared = [m for m in run["members"] if _no_locater(m)]
    for reading in READINGS:
      if shared and reading != run["reading"]:
        out.setdefault((run["label"], reading), []).append(dict(
            run, members=shared, reading=reading,
            shared_from=run["reading"],
            final_step=min(m["last_step"] for m in shared)))
  return out


def cell_members(cell_runs) -> tuple[list, list]:
  """(counted members, left-out members) of one cell's runs.

  The runs of a figure and reading are merged: seeds may come from one
  program (`seeds=N`) or from separate runs (`seed=S`). A (kappa1, kappa2,
  target, seed) met twice counts once (the longer run's, else the first).
  Only members at the cell's longest step count, so a mean never mixes a
  seed stopped early with finished ones; the others are left out (the
  report lists them).
  """
  chosen = {}
  for run in cell_runs:
    for m in run["members"]:
      key = (m["kappa1"], m["kappa2"], m["target"], m["seed"])
      if key not in chosen or m["last_step"] > chosen[key]["last_step"]:
        chosen[key] = {**m, "run_dir": run["run_dir"]}
  full = max((m["last_step"] for m in chosen.values()), default=0)
  counted = [m for m in chosen.values() if m["last_step"] == full]
  return counted, [m for m in chosen.values() if m["last_step"] < full]


def summarize_runs(runs) -> list[dict]:
  """One row per figure, reading and member group (members that differ
  only in seed), over every run of that figure and reading."""
  rows = []
  for (label, reading), rs in cells(runs).items():
    counted, _ = cell_members(rs)
    for (kappa1, kappa2, target), ms in sorted(_seed_groups(counted).items()):
      run_dirs = sorted({m["run_dir"] for m in ms})
      row = dict(figure=rs[0]["figure"], label=label, smoke=rs[0]["smoke"],
                 reading=reading, run_dirs=run_dirs,
                 d_model=rs[0].get("d_model"),
                 kappa1=kappa1, kappa2=kappa2, target=target,
                 seeds=sorted(m["seed"] for m in ms), n_seeds=len(ms),
                 commands=list(dict.fromkeys(
                     r["command"] for r in rs if r["run_dir"] in run_dirs)),
                 final_step=min(m["last_step"] for m in ms),
                 num_steps=max(r["num_steps"] for r in rs
                               if r["run_dir"] in run_dirs))
      for name, key, _ in QUANTITIES:
        vals = [training_plots.final_value(m["metrics"], key) for m in ms]
        row[f"{name}_mean"], row[f"{name}_std"] = _mean_std(vals)
        row[f"{name}_values"] = vals
      rows.append(row)
  return rows


def summarize(run_dirs) -> list[dict]:
  """`summarize_runs(load_runs(run_dirs))`."""
  return summarize_runs(load_runs(run_dirs))


def seed_mean(members) -> list[dict]:
  """Members differing only in seed -> one each, metrics seed-averaged.

  A metric is averaged over the steps every seed logged (the common
  prefix of their step lists, which coincide within one run); the merged
  member keeps the first seed's other fields and `n_seeds`.
  """
  out = []
  for ms in _seed_groups(members).values():
    metrics = {}
    for key in set.intersection(*(set(m["metrics"]) for m in ms)):
      n = min(len(m["metrics"][key][0]) for m in ms)
      steps = [np.asarray(m["metrics"][key][0][:n]) for m in ms]
      if n and all(np.array_equal(steps[0], st) for st in steps):
        metrics[key] = (steps[0], np.mean(
            [np.asarray(m["metrics"][key][1][:n]) for m in ms], axis=0))
    out.append({**ms[0], "metrics": metrics, "n_seeds": len(ms)})
  return out


def _pick(rows, kappa1_positive, kappa2):
  for r in rows:
    if (r["kappa1"] > 0) == kappa1_positive and r["kappa2"] == kappa2:
      return r
  return None


def _shortened(steps: int) -> str:
  """"; shortened: N of 50,000 steps" for a verdict on a shorter run."""
  return ("" if steps >= PAPER_STEPS else
          f"; shortened: {steps:,} of {PAPER_STEPS:,} steps")


def _compare(claim, quantity, sign, what, base, alt, contrast, spread=None):
  """One verdict: `alt` (stronger LocATER) against `base`; its note says
  when either ran fewer than the paper's steps. With one seed, `spread`
  (`replicates.spread`) makes a difference within the same-seed rerun
  spread "not significant"."""
  m0, s0 = base[f"{quantity}_mean"], base[f"{quantity}_std"]
  m1, s1 = alt[f"{quantity}_mean"], alt[f"{quantity}_std"]
  diff = m1 - m0
  one_seed = min(base["n_seeds"], alt["n_seeds"]) < 2
  if not (np.isfinite(m0) and np.isfinite(m1)):
    verdict, note = "not significant", "no values"
  elif one_seed:
    verdict = ("not significant" if diff == 0 else
               "reproduced" if np.sign(diff) == sign else "reversed")
    note = "one seed: no error bar"
    rel = (spread or {}).get(quantity, {}).get("rel")
    if rel is not None:
      inside = replicates.within(diff, m0, m1, rel)
      verdict = "not significant" if inside else verdict
      note += (f"; {'within' if inside else 'beyond'} "
               f"{replicates.FACTOR:g} x the same-seed rerun spread "
               f"({rel:.2g} relative)")
  else:
    pooled = math.sqrt((s0 ** 2 + s1 ** 2) / 2)
    if abs(diff) <= 2 * pooled:
      verdict = "not significant"
    else:
      verdict = "reproduced" if np.sign(diff) == sign else "reversed"
    note = (f"|diff| {abs(diff):.4g} vs 2 x pooled std {2 * pooled:.4g}, "
            f"{min(base['n_seeds'], alt['n_seeds'])} seeds")
  note += _shortened(min(base.get("final_step", PAPER_STEPS),
                         alt.get("final_step", PAPER_STEPS)))
  text = (f"{alt['label']}, {READINGS.get(alt['reading'], alt['reading'])}, "
          f"claim {claim} ({what}, {contrast}): **{verdict}**: "
          f"{_pm(m0, s0)} -> {_pm(m1, s1)} (diff {diff:+.4g}; {note})")
  return dict(figure=alt["figure"], label=alt["label"],
              reading=alt["reading"], claim=claim, contrast=contrast,
              kappa1=alt["kappa1"], kappa2=alt["kappa2"],
              verdict=verdict, diff=diff, note=note, text=text)


def verdicts(rows, spread=None) -> list[dict]:
  """Claims B, C, D per figure label and reading (see module docstring;
  `spread`: `replicates.spread`, the one-seed floor)."""
  groups = {}
  for r in rows:
    groups.setdefault((r["label"], r["reading"]), []).append(r)
  out = []
  for _, rs in sorted(groups.items()):
    pairs = []
    base, alt = _pick(rs, True, 0.0), _pick(rs, True, 1.0)
    if base and alt:
      pairs.append((base, alt, "kappa2 = 0 -> 1"))
    none = next((r for r in rs if r["kappa1"] == 0 and r["kappa2"] == 0),
                None)
    locater = [r for r in rs if r["kappa1"] > 0]
    if none and locater:
      best = max(locater, key=lambda r: r["kappa2"])
      pairs.append((none, best, f"none -> kappa1 = {best['kappa1']:g}, "
                                f"kappa2 = {best['kappa2']:g}"))
    for b, a, contrast in pairs:
      out += [_compare(c, q, s, w, b, a, contrast, spread)
              for c, q, s, w in CLAIMS]
  return out


CONTRAST_FIGS = ("8", "9", "10", "11", "12")   # need a no-LocATER group


def _seeds_done(rows, wanted):
  """(seeds of range(wanted) every row has at full length, steps): rows
  of one cell's member groups."""
  steps = min((r["final_step"] for r in rows), default=0)
  done = (set.intersection(*(set(r["seeds"]) for r in rows))
          if rows and steps >= PAPER_STEPS else set())
  return done & set(range(wanted)), steps


def _gaps(rows) -> dict:
  """(figure, reading) -> [(kind, its rows, seeds done, steps)] for every
  PLAN cell (full-length, non-smoke rows; `still_to_run` documents the
  rule): kind "sweep" (the LocATER groups; Fig. 7's two members) and, for
  Figs. 8-12, "none" (kappa1 = kappa2 = 0)."""
  have = {}                    # (figure, reading) -> its rows
  for r in rows:
    if not r["smoke"]:
      have.setdefault((r["figure"], r["reading"]), []).append(r)
  out = {}
  for fig, wanted in PLAN.items():
    for reading in READINGS:
      rs = have.get((fig, reading), [])
      kinds = {"sweep": [r for r in rs if r["kappa1"] > 0 or fig == "7"]}
      if not any(r["kappa1"] > 0 for r in kinds["sweep"]):
        kinds["sweep"] = []      # Fig. 7: a no-LocATER member shared alone
      if fig in CONTRAST_FIGS:
        kinds["none"] = [r for r in rs
                         if r["kappa1"] == 0 and r["kappa2"] == 0]
      out[fig, reading] = [(kind, krs, *_seeds_done(krs, wanted))
                           for kind, krs in kinds.items()]
  return out


# bench/gpu_paper.py's fastest path on a Hopper GPU (H200: 404.3 Fig. 6
# steps/s against 232.3 for the Triton-only default blocks, the same call,
# bench/gpu_results.md (9)); another GPU: --path scan_bf16_pallas
GPU_PATH = "scan_bf16_pallas_fa3"


def still_to_run(rows, path: str = GPU_PATH) -> list[str]:
  """Markdown lines: the PLAN cells that full-length runs do not cover yet.

  A cell (figure, reading) is covered when seeds 0..PLAN[figure]-1 of
  every LocATER member group reached 50,000 steps (in one run or several)
  and, for Figs. 8-12, so did a no-LocATER group (kappa1 = kappa2 = 0:
  `contrast` or `none` runs; Fig. 7's runs are that contrast for Fig. 6's
  model); a shorter run or fewer seeds is named as such. Each line ends
  with the `bench/gpu_paper.py` command that adds what is missing (one run
  per seed and kind, `--runs sweep,none`, so each fits a GPU slice), on
  training path `path`; where a figure's two readings lack the same, one
  line names both and its command trains them side by side
  (`--both_readings`: one program per seed). `todo_runs` lists the same
  runs one by one.
  """
  gaps = {}                     # figure -> {reading: (states, seeds, kinds)}
  for (fig, reading), kinds in _gaps(rows).items():
    wanted = PLAN[fig]
    states, missing, runs = [], set(), []
    for kind, krs, done, steps in kinds:
      if len(done) == wanted:
        continue
      runs.append(kind)
      missing |= set(range(wanted)) - done
      what = "" if kind == "sweep" else "no-LocATER member: "
      if not krs:
        states.append(what + "not run")
      elif steps < PAPER_STEPS:
        states.append(f"{what}shortened: {steps:,} of {PAPER_STEPS:,} "
                      "steps")
      else:
        states.append(f"{what}{len(done)} of {wanted} seeds (seed"
                      f"{'s' * (len(done) > 1)} "
                      f"{', '.join(map(str, sorted(done)))} done)")
    if runs:
      gaps.setdefault(fig, {})[reading] = (tuple(states), missing, runs)
  out = []
  for fig, by_reading in gaps.items():
    wanted = PLAN[fig]
    gap = list(by_reading.values())
    both = len(gap) == len(READINGS) and all(g == gap[0] for g in gap)
    for reading, (states, missing, runs) in (
        [("both", gap[0])] if both else by_reading.items()):
      first, n = min(missing), max(missing) - min(missing) + 1
      stage = "train_fairseq" if reading == "summed_loss" else "train"
      command = (f"python bench/gpu_paper.py --tfds_dir DIR --stages {stage}"
                 + (" --both_readings" if both else "")
                 + f" --figs {fig} --path {path}"
                 + (f" --seeds {n}" if n > 1 else "")
                 + (f" --first_seed {first}" if first else "")
                 + (f" --runs {','.join(runs)}" if runs != ["sweep"]
                    else ""))
      name = "both readings" if both else READINGS[reading]
      out.append(f"- Fig. {fig}, {name}: {'; '.join(states)} "
                 f"(wanted: {wanted} seed{'s' * (wanted > 1)} x "
                 f"{PAPER_STEPS:,} steps): `{command}`")
  return out


MAIN_TEXT_FIGS = ("6", "7")        # Sec. 7; Figs. 8-12 are Appendix D
_READING_ORDER = ("summed_loss", "mean_loss")


def todo_runs(rows) -> list[dict]:
  """The runs `still_to_run` asks for, one per seed and kind, in the order
  a GPU slice should train them: dicts {figure, reading, seed, kind}
  ("sweep" or "none"), written to summary.json's "todo" for
  `bench/gpu_paper.py --stages todo`.

  Order: the main text's Figs. 6 and 7 before the appendix's Figs. 8-12;
  then by seed (every figure's first look before more seeds of one), figure,
  reading (fairseq's first: at the literal reading kappa1 = 100 holds the
  scale near zero for every kappa2 (REPRODUCTION.md, Fig. 6), so the fairseq
  runs are the likelier match to the paper and their first look is worth
  more), kind (the sweep before its no-LocATER member). A no-LocATER run
  is listed once, under the first reading that lacks it: kappa1 = kappa2 =
  0 trains the same under both, and `cells` counts it for both.
  """
  out = []
  for (fig, reading), kinds in _gaps(rows).items():
    for kind, _, done, _ in kinds:
      out += [dict(figure=fig, reading=reading, seed=seed, kind=kind)
              for seed in sorted(set(range(PLAN[fig])) - done)]
  figs = list(PLAN)
  out.sort(key=lambda t: (
      t["figure"] not in MAIN_TEXT_FIGS, t["seed"], figs.index(t["figure"]),
      _READING_ORDER.index(t["reading"]), t["kind"] != "sweep"))
  seen = set()             # a "none" run serves both readings (`cells`)
  todo = []
  for t in out:
    if t["kind"] == "none":
      if (t["figure"], t["seed"]) in seen:
        continue
      seen.add((t["figure"], t["seed"]))
    todo.append(t)
  return todo


def _pm(mean, std):
  if not np.isfinite(mean):
    return "n/a"
  return f"{mean:.4g}" + (f" ± {std:.2g}" if np.isfinite(std) else "")


def run_info(run_dir) -> str:
  """Device, precision and wall time from `<run_dir>/run_info.jsonl`.

  The training loop appends one line per invocation (a resumed run has
  several); their wall times are summed (a line rebuilt from an earlier
  report may stand for several: "invocations"). "" if the file is absent
  (runs made before it existed).
  """
  lines = run_info_lines(run_dir)
  if not lines:
    return ""
  devices = sorted({f"{x['device_count']} x {x['device_kind']}"
                    for x in lines})
  dtypes = sorted({x.get("compute_dtype", "float32") for x in lines})
  wall = sum(x["wall_s"] for x in lines)
  n = sum(x.get("invocations", 1) for x in lines)
  return (f"{', '.join(devices)}; compute {'/'.join(dtypes)}; wall "
          f"{wall / 60:.1f} min in {n} invocation"
          f"{'s' if n > 1 else ''} ({phases_text(lines)})")


def run_info_lines(run_dir) -> list[dict]:
  """`<run_dir>/run_info.jsonl`'s lines, one per invocation ([] if none)."""
  path = pathlib.Path(run_dir) / "run_info.jsonl"
  if not path.is_file():
    return []
  return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def phases_text(lines) -> str:
  """"setup 4 s, compile 11 s, steps 124 s, ...": the invocations' wall
  time by phase (`qkspec.training.phases`), summed; runs from before the
  loop recorded phases say only what their wall time includes."""
  if not all("phases_s" in x for x in lines):
    return "setup, compilation and evaluation included"
  total = {}
  for x in lines:
    for k, v in x["phases_s"].items():
      total[k] = total.get(k, 0.0) + v
  return ", ".join(f"{k} {v:.0f} s" for k, v in total.items())


def _stripe_result(member, layer: int = 0):
  """`stripes.stripe_test` of the member's layer-`layer` rho map; else the
  result a record kept in place of the map (layer 0, members.json
  "stripes"), or None."""
  key = next((k for k in training_plots.rho_keys(layer)
              if k in member["metrics"]), None)
  if key is None or len(member["metrics"][key][0]) < 2:
    return member.get("stripes") if layer == 0 else None
  return stripes.stripe_test(member["metrics"][key][1])


def rho_stripes(members, layer: int = 0) -> list[tuple[str, dict]]:
  """(member name, `stripes.stripe_test` of its layer-`layer` rho map)."""
  names = training_plots.member_names(members)
  results = [(n, _stripe_result(m, layer)) for n, m in zip(names, members)]
  return [(n, r) for n, r in results if r is not None]


def stripe_verdicts(runs) -> list[dict]:
  """Fig. 7's claim per reading: salient stripes in rho_i over training
  with LocATER (kappa1 > 0) and none without (kappa1 = kappa2 = 0), over
  every seed of the cell: "reproduced" when every LocATER map has stripes
  and no map without it does, "reversed" for the opposite, else "not
  reproduced"."""
  out = []
  for (label, reading), rs in sorted(cells(runs).items()):
    if rs[0]["figure"] != "7":
      continue
    found = {True: [], False: []}          # LocATER? -> [stripes?]
    counted = cell_members(rs)[0]
    for m in counted:
      result = _stripe_result(m)
      if result is not None:
        found[m["kappa1"] > 0].append(result["stripes"])
    if not (found[True] and found[False]):
      continue
    (n1, s1), (n0, s0) = [(len(found[k]), sum(found[k]))
                          for k in (True, False)]
    verdict = ("reproduced" if s1 == n1 and s0 == 0 else
               "reversed" if s1 == 0 and s0 == n0 else "not reproduced")
    text = (f"{label}, {READINGS.get(reading, reading)}, claim stripes "
            f"(rho_i over training, none -> LocATER): **{verdict}**: "
            f"stripes in {s1} of {n1} LocATER map{'s' * (n1 > 1)} and "
            f"{s0} of {n0} without LocATER (permutation p < "
            f"{stripes.P_VALUE:g} and contrast C >= "
            f"{stripes.MIN_CONTRAST:g}"
            f"{_shortened(max(m['last_step'] for m in counted))})")
    out.append(dict(figure="7", label=label, reading=reading,
                    claim="stripes", verdict=verdict, text=text))
  return out


def _steps_line(r):
  k, planned = r["final_step"], r["num_steps"]
  line = f"{k:,} steps run of {planned:,} planned"
  if k < PAPER_STEPS:
    line = f"**SHORTENED: {k:,} of {PAPER_STEPS:,} steps** ({line})"
  elif k < planned:
    line = f"**stopped early**: {line}"
  return line


def figure(rows, label):
  """Final scale, entropy and valid ppl vs kappa2, one line per reading.

  Readings whose values coincide stay visible (the first wide and solid,
  the next thinner, dashed, hollow markers) and the panel says so, as
  `training_plots` does for members.
  """
  panels = [("scale", "scale tr$(W_{QK}^\\top W_{QK})$", "B"),
            ("entropy", "attention entropy (nats)", "C"),
            ("valid_ppl", "valid perplexity", "D")]
  readings = sorted({r["reading"] for r in rows if r["label"] == label})
  styles = [dict(ls=ls, marker=mk, lw=lw, ms=lw + 4.5, mfc="none",
                 zorder=2 + i)
            for i, (ls, mk, lw) in enumerate(zip(("-", "--"), ("o", "s"),
                                                 (2.6, 1.3)))]
  fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), layout="constrained")
  curves = {q: [] for q, _, _ in panels}
  for i, reading in enumerate(readings):
    rs = sorted((r for r in rows if r["label"] == label
                 and r["reading"] == reading and r["kappa1"] > 0),
                key=lambda r: r["kappa2"])
    for ax, (q, ylabel, _) in zip(axes, panels):
      means = [r[f"{q}_mean"] for r in rs]
      curves[q].append(means)
      ax.errorbar([r["kappa2"] for r in rs], means,
                  yerr=[np.nan_to_num(r[f"{q}_std"]) for r in rs],
                  capsize=3, label=f"{i + 1}: {READINGS.get(reading, reading)}",
                  **styles[i % len(styles)])
      ax.set(xlabel=r"$\kappa_2$", ylabel=ylabel)
  kappa2s, star = locater_minimum.star_curve(
      [r for r in rows if r["label"] == label])
  if kappa2s:                  # the same W* under both readings
    axes[0].plot(kappa2s, star, ":", color="0.4", lw=1.5, zorder=1,
                 label="LocATER alone (W* = cI)")
  positive = [r["kappa2"] for r in rows if r["kappa2"] > 0]
  for ax, (q, ylabel, claim) in zip(axes, panels):
    ax.set_xscale("symlog", linthresh=min(positive) if positive else 1e-3)
    ax.grid(alpha=0.3)
    log = training_plots.set_yscale(ax, curves[q])   # readings decades apart
    note = training_plots.coincide_note(curves[q], log, what="readings")
    ax.set_title(f"{ylabel} ({claim})" + (f"\n{note}" if note else ""),
                 fontsize=10)
  axes[0].legend(loc="lower right")   # W* rises with kappa2: that corner is free
  fig.suptitle(f"{label}: final values, mean ± std over seeds")
  return fig


def _slug(label):
  return label.lower().replace(". ", "").replace(" (", "_").strip(")")


def _table(rs):
  head = ["kappa1", "kappa2", "seeds"] + [t for _, _, t in QUANTITIES]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in sorted(rs, key=lambda r: (r["kappa1"], r["kappa2"])):
    cells = [f"{r['kappa1']:g}", f"{r['kappa2']:g}", str(r["n_seeds"])]
    cells += [_pm(r[f"{q}_mean"], r[f"{q}_std"]) for q, _, _ in QUANTITIES]
    lines.append("| " + " | ".join(cells) + " |")
  return lines


def write_summary(rows, directory, verdict_list=None,
                  spread=None) -> list[str]:
  """summary.csv and summary.json (rows, verdicts: `verdict_list`, else
  `verdicts(rows)`, the runs still to train: `todo_runs`, and the
  same-seed rerun spread: `spread`) in `directory`; their paths."""
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
    json.dump(dict(rows=rows, verdicts=(verdicts(rows) if verdict_list is
                                        None else verdict_list),
                   todo=todo_runs(rows), rerun_spread=spread or {}),
              f, indent=1, default=str)
  return [csv_path, json_path]


_CURVE_KEYS = ("mean/qk_scale", "mean/entropy", "valid/ppl", "valid/loss")


def _has_curves(member) -> bool:
  """Does `member` keep a curve (>= 2 logged steps) of a panel of
  `training_plots.fig6_figure`? (A record rebuilt from an earlier report
  keeps final values only.)"""
  return any(len(member["metrics"].get(k, ((),))[0]) > 1
             for k in _CURVE_KEYS)


def _earlier_figure(what: str, alt: str, png, rel) -> list[str]:
  """The line for a figure the records cannot draw: the one an earlier
  report drew from the runs themselves when it is still there."""
  if png.is_file():
    return [f"- {what} (drawn by an earlier report from the runs, which "
            "were not kept; their records hold final values only): "
            f"![{alt}]({rel}/{png.name})"]
  return [f"- {what}: not drawn (the records hold final values only)"]


def _curves(cell, counted, title, png, rel, paths) -> list[str]:
  """The cell's B-D curves over training (seeds averaged): drawn to `png`
  from the members that kept curves; the markdown lines."""
  drawn = [m for m in counted if _has_curves(m)]
  if not drawn:
    return _earlier_figure("curves over training", "curves", png, rel)
  panels_of = cell[0]["figure"]    # Fig. 7 (rho maps only): Fig. 6's model
  fig = training_plots.fig6_figure(seed_mean(drawn),      # B-D vs step
                                   "6" if panels_of == "7" else panels_of)
  seeds = max(len(g) for g in _seed_groups(drawn).values())
  fig.suptitle(f"{title}: over training"
               + (f", mean over {seeds} seeds" if seeds > 1 else ""))
  fig.savefig(png, dpi=90)
  plt.close(fig)
  paths.append(str(png))
  skipped = len(counted) - len(drawn)
  return [f"- curves over training: ![curves]({rel}/{png.name})"
          + (f" ({skipped} of {len(counted)} members not drawn: their "
             "records hold final values only)" if skipped else "")]


def _rho_maps(run, png, rel, paths) -> list[str]:
  """Fig. 7's rho_i heat maps of one run, drawn to `png`, and each
  member's stripe test; the markdown lines."""
  what = f"rho_i over training (`{run['run_dir']}`)"
  if any(k in m["metrics"] for m in run["members"]
         for k in training_plots.rho_keys(0)):
    fig = training_plots.rho_heatmap_figure(run["members"])
    fig.savefig(png, dpi=110)
    plt.close(fig)
    paths.append(str(png))
    md = [f"- {what}: ![rho]({rel}/{png.name})"]
  else:
    md = _earlier_figure(what, "rho", png, rel)
  return md + [f"  - {name}: {stripes.describe(result)}"
               for name, result in rho_stripes(run["members"])]


def report_command(run_dirs, out_path, replicate_dirs=()) -> str:
  """The launch/report.py command that writes `out_path` from `run_dirs`."""
  return (f"python launch/report.py --runs {','.join(map(str, run_dirs))} "
          + (f"--replicates {','.join(map(str, replicate_dirs))} "
             if replicate_dirs else "") + f"--out {out_path}")


def record_keys(config: dict) -> list[str]:
  """The metrics the report reads of a run of `config` (`run_records`):
  the QUANTITIES, valid/loss (the curves' stand-in for valid/ppl),
  train/loss (the last step) and, for Fig. 7, layer 0's rho_i."""
  keys = [k for _, k, _ in QUANTITIES] + ["valid/loss", "train/loss"]
  if figure_of(config)[0] == "7":
    keys += list(training_plots.rho_keys(0))
  return keys


def default_records_dir(out_path, figures_dir=None) -> str:
  """`records/` in the figures' directory (default: `reproduction/` next
  to `out_path`)."""
  return os.path.join(figures_dir or os.path.join(
      os.path.dirname(str(out_path)), "reproduction"), "records")


def keep_records(run_dirs, records_dir, replicate_dirs=()
                 ) -> tuple[list[str], list[str]]:
  """Records `run_dirs` and `replicate_dirs` in `records_dir`
  (`run_records.write`); (run records, replicate records): every record
  there, those of earlier calls included."""
  for role, dirs in (("run", run_dirs), ("replicate", replicate_dirs)):
    names = [run_records.name_of(run_records.origin(d)) for d in dirs]
    if len(set(names)) < len(names):
      raise ValueError(f"two {role} directories share a name ({names}): a "
                       "record is named after its run directory's basename.")
    for d in dirs:
      run_records.write(d, records_dir, record_keys(_load_config(d)), role)
  return (run_records.listed(records_dir, "run"),
          run_records.listed(records_dir, "replicate"))


def _spread(runs, replicate_dirs) -> dict:
  """`replicates.spread` of the replicate runs that kept their members,
  merged with the spreads kept by records that did not."""
  kept = [run_records.read(d).get("spread") for d in replicate_dirs]
  loaded = load_runs([d for d, s in zip(replicate_dirs, kept) if s is None])
  return replicates.merge(
      replicates.spread(runs, loaded, [(n, k) for n, k, _ in QUANTITIES]),
      *[s for s in kept if s is not None])


def write_report(run_dirs, out_path, figures_dir=None, command=None,
                 replicate_dirs=(), records_dir=None) -> list:
  """Writes `out_path` (markdown), the summary and figures; their paths.

  `replicate_dirs`: runs that repeat a run of `run_dirs` (same config and
  seed); their differences give the one-seed floor (`replicates`).
  `records_dir`: record the runs there (`run_records`) and report on every
  record it holds, those of earlier calls included; the markdown then
  names the command that regenerates it from the records alone."""
  out_path = pathlib.Path(out_path)
  figures_dir = pathlib.Path(figures_dir or out_path.parent / "reproduction")
  if records_dir is not None:
    run_dirs, replicate_dirs = keep_records(run_dirs, records_dir,
                                            replicate_dirs)
    command = command or f"python launch/report.py --out {out_path}"
    if not run_dirs:
      raise ValueError(f"no run records in {records_dir}: give run "
                       "directories (launch/report.py --runs).")
  runs = load_runs(run_dirs)
  rows = summarize_runs(runs)
  if not rows:
    raise ValueError("no members found in the run directories.")
  spread = _spread(runs, replicate_dirs)
  vs = locater_minimum.annotate(verdicts(rows, spread), rows)
  vs += stripe_verdicts(runs)
  by_cell = cells(runs)
  paths = write_summary(rows, figures_dir, vs, spread)
  rel = os.path.relpath(figures_dir, out_path.parent)
  records = ("" if records_dir is None else
             f" from the run records in `{records_dir}` (what the report "
             "reads of each run, kept so that it regenerates without the "
             "runs; `--runs DIR,...` adds or replaces records)")
  md = ["# Reproduction: language-model claims (Sec. 7, Figs. 6-12)", "",
        "Generated by `" + (command or report_command(run_dirs, out_path,
                                                      replicate_dirs))
        + f"`{records}; do not edit by hand.",
        f"Summary: [{rel}/summary.csv]({rel}/summary.csv), "
        f"[{rel}/summary.json]({rel}/summary.json).", "",
        "Claims (paper): with stronger kappa2 the scale tr(W_QK^T W_QK) "
        "shrinks (B), the attention entropy is higher (C) and the valid "
        "perplexity lower (D). A verdict is *not significant* when "
        "|mean difference| <= 2 x the pooled std over seeds, or, with one "
        f"seed, <= {replicates.FACTOR:g} x the relative difference between "
        "two runs of the same config and seed (below).", "",
        "## Verdicts", ""]
  md += [f"- {v['text']}" for v in vs] or ["- (no kappa2 = 0 / 1 pair)"]
  md += [""] + locater_minimum.markdown(rows, READINGS)
  labels = sorted({r["label"] for r in rows},
                  key=lambda l: (len(l.split()[1]), l))
  for label in labels:
    md += ["", f"## {label}", ""]
    locater = any(r["label"] == label and r["kappa1"] > 0 for r in rows)
    if locater and not label.startswith("Fig. 7"):   # Fig. 7: heat maps
      fig = figure(rows, label)       # (its kappa1 > 0 groups against kappa2)
      png = figures_dir / f"{_slug(label)}.png"
      fig.savefig(png, dpi=110)
      plt.close(fig)
      paths.append(str(png))
      md += [f"![{label}]({rel}/{png.name})", ""]
    for reading in sorted({r["reading"] for r in rows if r["label"] == label}):
      rs = [r for r in rows if r["label"] == label and r["reading"] == reading]
      md += [f"### {READINGS.get(reading, reading)}", ""]
      cell = by_cell[(label, reading)]
      for run in cell:
        md += [f"- run `{run['run_dir']}`: {_steps_line(run)}"
               + (f"; its no-LocATER members only, shared from the "
                  f"{READINGS[run['shared_from']]} reading (kappa1 = kappa2 "
                  "= 0 trains the same under both)"
                  if "shared_from" in run else
                  "; its members of this reading (the run trained both "
                  "readings side by side, on the same batches)"
                  if run["both_readings"] else ""),
               f"  - command: `{run['command']}`"]
      counted, left_out = cell_members(cell)
      if left_out:
        md.append(f"- left out (stopped before step "
                  f"{max(m['last_step'] for m in counted):,}): " + ", ".join(
                      f"seed {m['seed']}, kappa2 = {m['kappa2']:g} at step "
                      f"{m['last_step']:,}" for m in left_out))
      png = figures_dir / f"{_slug(label)}_curves_{reading}.png"
      md += _curves(cell, counted, f"{label}, {READINGS.get(reading, reading)}",
                    png, rel, paths)
      for i, run in enumerate(cell):
        if run["figure"] == "7" and "shared_from" not in run:  # rho maps
          png = figures_dir / f"{_slug(label)}_rho_{reading}_{i}.png"
          md += _rho_maps(run, png, rel, paths)
      md += [""] + _table(rs)
      md += [""] + [f"- {v['text']}" for v in vs
                    if v["label"] == label and v["reading"] == reading]
      md.append("")
  missing = still_to_run(rows)
  md += ["", "## Still to run", "",
         "What the report lacks before every claim has its numbers "
         "(resumable; `bash bench/gpu_session.sh` takes the same arguments "
         "on a GPU machine without network access, BUILD.md; `--stages "
         "todo` trains these runs one by one, in the order of summary.json's "
         "\"todo\" list, as many as fit the slice's time; with "
         "`--both_readings` a figure's two readings of a seed as one "
         "program, and, where the measured members curve makes them cheap, "
         "Figs. 8-12 with 3 seeds, `--pack_seeds`; `" + GPU_PATH + "` "
         "needs a Hopper GPU, elsewhere `--path scan_bf16_pallas`):", ""]
  md += missing or ["- nothing: every figure has both readings at full "
                    "length with the planned seeds."]
  md += ["", "## Run-to-run spread (same config, same seed)", "",
         "Two GPU runs of one config and seed are not bit-identical (by "
         "default XLA's GPU scatter-adds and some reductions may sum in "
         "another order each run), so one "
         "seed's kappa2 effect must exceed their difference before its sign "
         "means anything; seeds spread results further (the +- columns). "
         "Largest relative difference of the final values:", ""]
  md += replicates.markdown(spread, {n: t for n, _, t in QUANTITIES})
  md += ["", "## Runs", "",
         "Device and wall time come from each run's `run_info.jsonl` "
         "(written by the training loop); \"not recorded\" marks runs "
         "made before it existed.", ""]
  listed = set()
  for run in runs:
    if run["run_dir"] in listed:   # both readings' halves: one program
      continue
    listed.add(run["run_dir"])
    reading = ("both readings side by side" if run["both_readings"]
               else READINGS.get(run["reading"]))
    md.append(f"- {run['label']}, {reading}: "
              f"{_steps_line(run)}; "
              f"{run_info(run['path']) or 'device and wall time not recorded'}"
              f"; `{run['command']}`")
  md += ["", "## Known deviations from fairseq", ""]
  md += [f"- {d}" for d in DEVIATIONS]
  out_path.parent.mkdir(parents=True, exist_ok=True)
  out_path.write_text("\n".join(md) + "\n")
  return [str(out_path)] + paths
