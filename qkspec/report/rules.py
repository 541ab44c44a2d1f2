"""REPRODUCTION.md's "How a verdict is reached": the rules in order, the
floors one-seed cells are held to (`floors`), the family Holm corrects
over (`pooled`) and which way each rule errs."""
from qkspec.records import rundir
from qkspec.report import floors
from qkspec.report import pooled
from qkspec.report import stats as rs
from qkspec.report import verdicts

_QUANTITIES = [q for q, _ in floors.QUANTITIES]

# rule -> which way it errs, and why
ERRS = (
    ("Minimal effect", "toward too little, by design: a real effect "
     "smaller than it reads *no practical effect*"),
    ("Paired t-test over 3-4 seeds", "exact for normal differences, but "
     "with so few seeds toward too little for small effects (n.s.); alone "
     "at 5%, toward too much over the many tests the report makes (the "
     "pooled lines correct for that)"),
    ("Seed-spread floor (kappa2)", "measured on Fig. 6's architecture; "
     "toward too much wherever it is transferred (†) to a noisier one"),
    ("sqrt(2) x group spread (none)", "it ignores the positive covariance "
     "of two runs of one seed (same initialisation and batches), so it "
     "overstates the noise: toward too little (toward n.s.)"),
    ("Rerun floor", "GPU nondeterminism alone, no seed variation: on its "
     "own toward too much, so it only ever raises the floor; measured on "
     "LocATER members, it takes a no-LocATER member to be as reproducible"),
    ("Over training, one seed", "held to the final step's floors, while "
     "averaging over evaluations lowers the noise: toward too little"),
    ("Best kappa2 > 0 (Bonferroni)", "Bonferroni over correlated "
     "comparisons: toward too little"),
    ("Sign test over cells", "it ignores sizes (toward too little for "
     "large, consistent effects) and takes cells of different figures as "
     "independent though they share seed 0's batch order (toward too "
     "much); cells that share a member count as one"),
    ("Holm over the family", "family-wise error at 5% under any "
     "dependence between the tests: toward too little"),
    ("Stripe test (superseded)", "it counts a smooth gradient over "
     "positions as stripes: toward too much"),
)


def _rel_row(what, refs, how) -> str:
  cells = [f"{refs[q]['rel']:.2g}" if q in refs else "-" for q in _QUANTITIES]
  return f"| {what} | {' | '.join(cells)} | {how} |"


def floor_table(seed_ref, reruns) -> list[str]:
  """One row per seed reference (reading, contrast) and per rerun
  (architecture, reading): rel of each quantity, what it was measured on."""
  out = ["| floor | rel: " + " | rel: ".join(_QUANTITIES) + " | measured on |",
         "|" + "---|" * (len(_QUANTITIES) + 2)]
  seeds, rerun = {}, {}
  for (reading, kind, q), r in sorted(seed_ref.items()):
    seeds.setdefault((reading, kind), {})[q] = r
  for (arch, reading, q), r in sorted(reruns.items()):
    rerun.setdefault((arch, reading), {})[q] = r
  for (reading, kind), refs in seeds.items():
    r = next(iter(refs.values()))
    how = (f"{r['label']}, paired difference over {r['n']} seeds"
           if r["paired"] else f"{r['label']}: no no-LocATER seeds to "
           f"pair; sqrt(2) x the stronger group's spread over {r['n']} seeds")
    out.append(_rel_row(f"seeds, {kind}, {rundir.READING_NAMES[reading]}",
                        refs, how))
  for ((layers, d), reading), refs in rerun.items():
    r = next(iter(refs.values()))
    out.append(_rel_row(
        f"rerun, L = {layers}, d = {d}, {rundir.READING_NAMES[reading]}",
        refs, f"{r['label']} run twice, {r['n']} member pairs"))
  return out


def markdown(seed_ref, reruns, tests) -> list[str]:
  """The section's lines after its heading."""
  mins = ", ".join(
      f"{q} {size:.1%} of the larger mean" if kind == "relative"
      else f"{q} {size:g}" + (" nats" if q == "entropy" else "")
      for q, (kind, size) in rs.MIN_EFFECT.items() if q in _QUANTITIES)
  out = [
      "Each claim is the difference alt - base between members of one "
      "seed (same initialisation and batches). Its verdict, in order: "
      f"(1) |mean difference| below the minimal effect ({mins}) is *no "
      "practical effect*; (2) with two seeds or more, a paired t-test: "
      "significant when the 95% interval mean +- t_{n-1} s / sqrt(n) "
      f"excludes 0 (t_2 = {rs.t_critical(2):.2f}, t_3 = "
      f"{rs.t_critical(3):.2f}); (3) with one seed, significant when "
      "|difference| exceeds the larger of two floors t x rel x max(|base|, "
      "|alt|), and then only *indicative (one seed)*: the seed spread of "
      "the same contrast and reading on the figure with the most seeds "
      "(t_{n-1}), and the rerun noise of a paired difference on the cell's "
      "architecture and reading (rel = the root mean square of the rerun "
      "members' relative changes, t_n over n member pairs; per reading, as "
      "the readings' W_QK sit decades apart), where the records have a "
      "rerun (qkspec/report/floors.py). A seed spread "
      "held to on another architecture with no rerun of its own is "
      f"*{verdicts.TRANSFERRED}* (†). C and D are also judged over training: "
      "per seed the difference averaged over the evaluations after the "
      f"first {rs.WARMUP:.0%} of steps, by the same rules. Each claim is "
      "then pooled over the cells by an exact sign test (qkspec/report/"
      "pooled.py) and held to Holm's correction over every test the report "
      f"makes: {_family(tests)}.", ""] + floor_table(seed_ref, reruns)
  ratio = transfer_note(seed_ref, reruns)
  return out + ["", "Which way each rule errs:", ""] + [
      f"- {rule}: {how}" + (f" (the rerun noise of perplexity, against "
                            f"Fig. 6's seed spread: {ratio})"
                            if rule.startswith("Seed-spread") and ratio
                            else "") + "." for rule, how in ERRS]


def _family(tests) -> str:
  return f"{len(tests)} tests ({pooled.family_words(tests)})"


def transfer_note(seed_ref, reruns) -> str:
  """How the measured rerun noise compares with the transferred floor."""
  notes = []
  for (arch, reading, q), r in sorted(reruns.items()):
    seed = seed_ref.get((reading, "kappa2", q))
    if q == "valid_ppl" and seed and arch != seed["arch"]:
      notes.append(f"{r['label']}, {rundir.READING_NAMES[reading]}: "
                   f"{r['rel'] / seed['rel']:.1f} x")
  return "; ".join(notes)
