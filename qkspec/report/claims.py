"""Fig. 7's stripe verdict and what the report still lacks (Sec. 7).

`stripe_verdicts` judges Fig. 7's stripes in rho_i (`stripes`);
`still_to_run` lists what the report lacks of its `PLAN` (both readings,
50,000 steps, 3 seeds for Fig. 6 and 1 for Figs. 7-12, and a no-LocATER
member for Figs. 6 and 8-12) with the `launch/train.py` command for it.
"""
from qkspec.records import rundir
from qkspec.report import run_cells
from qkspec.report import stripes

# figure -> seeds the report asks for under each reading
PLAN = {"6": 3, "7": 1, "8": 1, "9": 1, "10": 1, "11": 1, "12": 1}
CONTRAST_FIGS = ("6", "8", "9", "10", "11", "12")   # need a no-LocATER group


def _stripe_result(member):
  """`stripes.stripe_test` of the member's layer-0 rho map, else the
  result its record kept, or None."""
  key = next((k for k in rundir.rho_keys(0)
              if k in member["metrics"]), None)
  if key is None or len(member["metrics"][key][0]) < 2:
    return member.get("stripes")
  return stripes.stripe_test(member["metrics"][key][1])


def rho_stripes(members) -> list[tuple[str, dict]]:
  """(member name, `stripes.stripe_test` of its layer-0 rho map)."""
  names = rundir.member_names(members)
  results = [(n, _stripe_result(m)) for n, m in zip(names, members)]
  return [(n, r) for n, r in results if r is not None]


def stripe_verdicts(runs) -> list[dict]:
  """Fig. 7's claim per reading: "reproduced" when every LocATER map has
  stripes and no other does, "reversed" for the opposite, else "not
  reproduced"; `kept`: a record kept results, not maps; `earlier`: some
  result is `stripes.earlier`'s."""
  out = []
  for (label, reading), rs in sorted(run_cells.cells(runs).items(),
                                     key=run_cells.cell_order):
    if rs[0]["figure"] != "7":
      continue
    found = {True: [], False: []}          # LocATER? -> [stripes?]
    counted = run_cells.cell_members(rs)[0]
    results = [(m, _stripe_result(m)) for m in counted]
    for m, result in results:
      if result is not None:
        found[m["kappa1"] > 0].append(result["stripes"])
    if not (found[True] and found[False]):
      continue
    earlier = any(r is not None and stripes.earlier(r) for _, r in results)
    (n1, s1), (n0, s0) = [(len(found[k]), sum(found[k]))
                          for k in (True, False)]
    steps = max(m["last_step"] for m in counted)
    verdict = ("reproduced" if s1 == n1 and s0 == 0 else
               "reversed" if s1 == 0 and s0 == n0 else "not reproduced")
    text = (f"{label}, {run_cells.reading_name(reading)}, claim stripes "
            f"(rho_i over training, none -> LocATER): **{verdict}**: "
            f"stripes in {s1} of {n1} LocATER map{'s' * (n1 > 1)} and "
            f"{s0} of {n0} without LocATER ("
            + (stripes.EARLIER_RULE if earlier else stripes.RULE)
            + ("" if steps >= run_cells.PAPER_STEPS else
               f"; shortened: {steps:,} of {run_cells.PAPER_STEPS:,} "
               "steps") + ")")
    kept = any(not any(k in m["metrics"] for k in rundir.rho_keys(0))
               for m in counted)       # a record kept results, not maps
    summary = (f"{run_cells.reading_name(reading)}: stripes in {s1} of "
               f"{n1} LocATER map{'s' * (n1 > 1)} and {s0} of {n0} "
               "without.")
    out.append(dict(figure="7", label=label, reading=reading,
                    claim="stripes", verdict=verdict, text=text,
                    summary=summary, kept=kept, earlier=earlier))
  return out


def _plan_cells(rows) -> dict:
  """(figure, reading) -> {kind: its rows} per PLAN cell, kind "sweep"
  (the LocATER groups) and "none" (no LocATER)."""
  have = {}                    # (figure, reading) -> its rows
  for r in rows:
    if not r["smoke"]:
      have.setdefault((r["figure"], r["reading"]), []).append(r)
  out = {}
  for fig in PLAN:
    for reading in run_cells.READINGS:
      rs = have.get((fig, reading), [])
      kinds = {"sweep": [r for r in rs if r["kappa1"] > 0 or fig == "7"]}
      if not any(r["kappa1"] > 0 for r in kinds["sweep"]):
        kinds["sweep"] = []      # Fig. 7: a no-LocATER member shared alone
      if fig in CONTRAST_FIGS:
        kinds["none"] = [r for r in rs
                         if r["kappa1"] == 0 and r["kappa2"] == 0]
      out[fig, reading] = kinds
  return out


def still_to_run(rows) -> list[str]:
  """Markdown lines: the PLAN cells full-length runs do not cover yet, each
  with the command that trains what is missing (one line for both
  readings where they lack the same)."""
  gaps = {}                     # figure -> {reading: (states, seeds, kinds)}
  for (fig, reading), kinds in _plan_cells(rows).items():
    wanted = PLAN[fig]
    states, missing, runs = [], set(), []
    for kind, krs in kinds.items():
      steps = min((r["final_step"] for r in krs), default=0)
      done = set()              # the seeds every row has at full length
      if krs and steps >= run_cells.PAPER_STEPS:
        done = set.intersection(*(set(r["seeds"]) for r in krs))
      done &= set(range(wanted))
      if len(done) == wanted:
        continue
      runs.append(kind)
      missing |= set(range(wanted)) - done
      what = "" if kind == "sweep" else "no-LocATER member: "
      if not krs:
        states.append(what + "not run")
      elif steps < run_cells.PAPER_STEPS:
        states.append(f"{what}shortened: {steps:,} of "
                      f"{run_cells.PAPER_STEPS:,} steps")
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
    both = (len(gap) == len(run_cells.READINGS)
            and all(g == gap[0] for g in gap))
    for reading, (states, missing, runs) in (
        [("both", gap[0])] if both else by_reading.items()):
      command = train_command(fig, "both" if both else reading, missing,
                              runs)
      name = "both readings" if both else run_cells.reading_name(reading)
      out.append(f"- Fig. {fig}, {name}: {'; '.join(states)} "
                 f"(wanted: {wanted} seed{'s' * (wanted > 1)} x "
                 f"{run_cells.PAPER_STEPS:,} steps): {command}")
  return out


_DEPTH_WIDTH = {fig: ld for ld, fig in run_cells.FIGURES.items()}


def train_command(fig: str, reading: str, seeds: set[int],
                  kinds: list[str]) -> str:
  """The `launch/train.py` commands (markdown, `; `-separated) that train
  `kinds` of figure `fig` under `reading` (or "both") for `seeds`: one run
  for seeds 0..N-1, else one per seed."""
  name, parts = run_cells.config_file(     # Fig. 7: Fig. 6's model
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
