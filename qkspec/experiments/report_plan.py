"""What the report still lacks, and the runs a GPU slice trains next.

* `still_to_run(rows)` (rows: `report_runs.summarize_runs`): the cells of
  the plan (every figure x both readings; 3 seeds for Fig. 6, 1 elsewhere;
  50,000 steps) that no run covers yet, each with the `bench/gpu_paper.py`
  command that adds it;
* `todo_runs(rows)`: the same runs one by one, in the order a GPU slice
  trains them (summary.json's "todo", `gpu_paper.py --stages todo`).
"""
from qkspec.experiments import report_runs

# figure -> seeds the report asks for under each reading (issue: >= 3 seeds
# for Fig. 6, >= 1 elsewhere)
PLAN = {"6": 3, "7": 1, "8": 1, "9": 1, "10": 1, "11": 1, "12": 1}
CONTRAST_FIGS = ("8", "9", "10", "11", "12")   # need a no-LocATER group


def _seeds_done(rows, wanted):
  """(seeds of range(wanted) every row has at full length, steps): rows
  of one cell's member groups."""
  steps = min((r["final_step"] for r in rows), default=0)
  done = (set.intersection(*(set(r["seeds"]) for r in rows))
          if rows and steps >= report_runs.PAPER_STEPS else set())
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
    for reading in report_runs.READINGS:
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


# bench/gpu_paper.py's fastest path on a Hopper GPU: the loss's forward
# and its dW from FlashAttention-3 (bench/gpu_results.md (11)) and the
# layers' fewer kernels (fused attention, one QKV matmul, Post-LN's
# residual, dropout and LayerNorm as one kernel): H200, the same call, Fig.
# 10's model 795.7 steps/s at one member against 334.7 without the fewer
# kernels, 467.6 against 263.7 at five, Fig. 6's sweep 452.8 against 438.9
# (bench/gpu_results.md (14)); the runs' path from 2026-11-27's second
# slice on. Another GPU: --path scan_bf16_pallas
GPU_PATH = "scan_bf16_pallas_fa3dw_fused"


def still_to_run(rows, path: str = GPU_PATH) -> list[str]:
  """Markdown lines: the PLAN cells that full-length runs do not cover yet.

  A cell (figure, reading) is covered when seeds 0..PLAN[figure]-1 of
  every LocATER member group reached 50,000 steps (in one run or several)
  and, for Figs. 8-12, so did a no-LocATER group (kappa1 = kappa2 = 0:
  `contrast` or `none` runs; Fig. 7's runs are that contrast for Fig. 6's
  model); a shorter run or fewer seeds is named as such. Each line ends
  with the `bench/gpu_paper.py` command that adds what is missing (one run
  per seed; a missing sweep and no-LocATER member as one program,
  `--contrast`: on the members curves measured so far one member more
  costs less than a run of its own), on
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
      elif steps < report_runs.PAPER_STEPS:
        states.append(f"{what}shortened: {steps:,} of "
                      f"{report_runs.PAPER_STEPS:,} steps")
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
    both = (len(gap) == len(report_runs.READINGS)
            and all(g == gap[0] for g in gap))
    for reading, (states, missing, runs) in (
        [("both", gap[0])] if both else by_reading.items()):
      first, n = min(missing), max(missing) - min(missing) + 1
      stage = "train_fairseq" if reading == "summed_loss" else "train"
      command = (f"python bench/gpu_paper.py --tfds_dir DIR --stages {stage}"
                 + (" --both_readings" if both else "")
                 + f" --figs {fig} --path {path}"
                 + (f" --seeds {n}" if n > 1 else "")
                 + (f" --first_seed {first}" if first else "")
                 + _runs_flag(runs))
      name = "both readings" if both else report_runs.reading_name(reading)
      out.append(f"- Fig. {fig}, {name}: {'; '.join(states)} "
                 f"(wanted: {wanted} seed{'s' * (wanted > 1)} x "
                 f"{report_runs.PAPER_STEPS:,} steps): `{command}`")
  return out


def _runs_flag(kinds: list[str]) -> str:
  """The `bench/gpu_paper.py` flag that trains the missing `kinds` of a
  cell: the sweep alone is the default, the sweep and its no-LocATER
  member one program (`--contrast`), the member alone `--runs none`."""
  if kinds == ["sweep"]:
    return ""
  return " --contrast" if kinds == ["sweep", "none"] else (
      f" --runs {','.join(kinds)}")


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
