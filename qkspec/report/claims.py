"""Fig. 7's stripe verdict (Sec. 7): `stripe_verdicts` judges the
stripes in rho_i of each reading's maps (`stripes`), or the results a
record kept of the earlier test."""
from qkspec.records import rundir
from qkspec.report import run_cells
from qkspec.report import stripes

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
                    summary=summary, kept=kept, earlier=earlier, steps=steps,
                    p_values=[r["p_value"] for _, r in results
                              if r is not None]))
  return out
