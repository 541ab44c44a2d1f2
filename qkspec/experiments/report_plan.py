"""What the report still lacks: `still_to_run(rows)`.

The plan is every paper figure under both readings of kappa, trained for
50,000 steps: 3 seeds for Fig. 6, 1 for Figs. 7-12, and for Figs. 8-12 a
no-LocATER member (kappa1 = kappa2 = 0) beside the kappa2 sweep. For each
cell of the plan that no run covers yet, `still_to_run` names what is
missing and the `launch/train.py` command that trains it.
"""
from qkspec.experiments import report_runs

# figure -> seeds the report asks for under each reading
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


def still_to_run(rows) -> list[str]:
  """Markdown lines: the PLAN cells that full-length runs do not cover yet.

  A cell (figure, reading) is covered when seeds 0..PLAN[figure]-1 of
  every LocATER member group reached 50,000 steps (in one run or several)
  and, for Figs. 8-12, so did a no-LocATER group (kappa1 = kappa2 = 0:
  `contrast` or `none` runs; Fig. 7's runs are that contrast for Fig. 6's
  model); a shorter run or fewer seeds is named as such. Each line ends
  with the `launch/train.py` command (`train_command`) that trains what is
  missing; where a figure's two readings lack the same, one line names
  both and its command trains them side by side in one program.
  rows: `report_runs.summarize_runs`.
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
      command = train_command(fig, "both" if both else reading, missing,
                              runs)
      name = "both readings" if both else report_runs.reading_name(reading)
      out.append(f"- Fig. {fig}, {name}: {'; '.join(states)} "
                 f"(wanted: {wanted} seed{'s' * (wanted > 1)} x "
                 f"{report_runs.PAPER_STEPS:,} steps): {command}")
  return out


_DEPTH_WIDTH = {fig: ld for ld, fig in report_runs.FIGURES.items()}


def train_command(fig: str, reading: str, seeds: set[int],
                  kinds: list[str]) -> str:
  """The `launch/train.py` commands (markdown, `; `-separated) that train
  `kinds` ("sweep": the LocATER members, "none": the no-LocATER member)
  of figure `fig` under `reading` ("mean_loss", "summed_loss" or "both",
  side by side) for `seeds`: one run for seeds 0..N-1 (`seeds=N`), else
  one run per seed (`seed=S`). The no-LocATER member alone trains the same
  under both readings, so its command names none."""
  name, parts = report_runs.config_file(     # Fig. 7: Fig. 6's model
      fig, *_DEPTH_WIDTH.get(fig, (1, 128)))
  if kinds != ["none"]:
    parts += {"both": ["both_readings"], "summed_loss": ["fairseq"]}.get(
        reading, [])
  parts += {("sweep", "none"): ["contrast"], ("none",): ["none"]}.get(
      tuple(kinds), [])
  if len(seeds) > 1 and seeds == set(range(len(seeds))):
    args = [parts + [f"seeds={len(seeds)}"]]
  else:
    args = [parts + ([f"seed={s}"] if s else []) for s in sorted(seeds)]

  def command(arg):
    config = f"configs/{name}.py" + (f":{','.join(arg)}" if arg else "")
    workdir = f"runs/fig{fig}" + "".join(
        f"_{a.replace('=', '')}" for a in arg
        if not a.startswith(("L=", "d=")))
    return f"`python launch/train.py --config {config} --workdir {workdir}`"
  return "; ".join(command(arg) for arg in args)
