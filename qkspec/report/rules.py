"""REPRODUCTION.md's "How a verdict is reached": the rules in order, the
noises one-seed cells are held to (`floors`), the families the pooled
claims are corrected in (`pooled`) and which way each rule errs, in words
of its own, from an `evidence.Evidence`."""
from qkspec.records import rundir
from qkspec.report import floors
from qkspec.report import stats as rs

# rule -> which way it errs, and why
ERRS = (
    ("Minimal effect", "toward too little, by design: a real effect "
     "smaller than it reads *no practical effect*"),
    ("Paired t-test over 3-4 seeds", "exact for normal differences, but "
     "with so few seeds toward too little for small effects (n.s.); alone "
     "at 5%, toward too much over the many per-cell tests, which are "
     "descriptive: only the pooled families are corrected"),
    ("One-seed floors", "the largest noise the records measure for the "
     "reading on any architecture: toward too little (n.s., undetermined) "
     "where a cell's own architecture is quieter, toward too much only "
     "where it is noisier than every architecture measured, which a cell "
     "marked † (none measured on it) cannot exclude"),
    ("sqrt(2) x group spread (none)", "errs both ways, by quantity: it "
     "ignores the positive covariance of two runs of one seed (same "
     "initialisation and batches), which overstates a paired difference's "
     "noise (perplexity: toward too little), and it takes the LocATER "
     "group's seed spread for the no-LocATER member's, which understates "
     "it where that member varies more over seeds (entropy; the scale "
     "under the literal reading, whose LocATER group sits at W*: toward "
     "too much); every none verdict rests on it (‡) until the backlog's "
     "paired no-LocATER seeds exist"),
    ("Rerun floor", "two programs of one config and seed (other members "
     "side by side, other commits), so more than XLA's nondeterminism and "
     "less than a seed's variation; measured on LocATER members, it takes "
     "a no-LocATER member to be as reproducible: on its own toward too "
     "much, so it is one floor among the others"),
    ("Over training, one seed", "held to the final step's floors, while "
     "averaging over evaluations lowers the noise: toward too little"),
    ("Best kappa2 > 0 (Bonferroni)", "Bonferroni over correlated "
     "comparisons: toward too little"),
    ("Sign test over units", "one unit per independent initialisation, but "
     "every unit sees one batch order (data.seed): toward too much; it "
     "ignores sizes: toward too little for large, consistent effects"),
    ("Holm over each family", "family-wise error at 5% under any "
     "dependence between its tests: toward too little"),
    ("Stripe test (superseded)", "it counts a smooth gradient over "
     "positions as stripes: toward too much; Fig. 7 reads undetermined on "
     "it, and its p-values are in no family"),
)


def _rel_row(what, refs, how) -> str:
  cells = [f"{refs[q].rel:.2g}" if q in refs else "-"
           for q in floors.QUANTITIES]
  return f"| {what} | {' | '.join(cells)} | {how} |"


def floor_table(seed_refs, reruns) -> list[str]:
  """One row per seed reference (reading, contrast) and per rerun
  (architecture, reading): rel of each quantity, what it was measured on."""
  out = ["| floor | rel: " + " | rel: ".join(floors.QUANTITIES)
         + " | measured on |",
         "|" + "---|" * (len(floors.QUANTITIES) + 2)]
  seeds, rerun = {}, {}
  for (reading, kind, q), r in sorted(seed_refs.items()):
    seeds.setdefault((reading, kind), {})[q] = r
  for (arch, reading, q), r in sorted(reruns.items()):
    rerun.setdefault((arch, reading), {})[q] = r
  for (reading, kind), refs in seeds.items():
    r = next(iter(refs.values()))
    how = (f"{r.label}, paired difference over {r.n} seeds" if r.paired
           else f"{r.label}: no no-LocATER seeds to pair; sqrt(2) x the "
           f"LocATER group's spread over {r.n} seeds")
    out.append(_rel_row(f"seeds, {kind}, {rundir.READING_NAMES[reading]}",
                        refs, how))
  for ((layers, d), reading), refs in rerun.items():
    r = next(iter(refs.values()))
    out.append(_rel_row(
        f"rerun, L = {layers}, d = {d}, {rundir.READING_NAMES[reading]}",
        refs, f"{r.label} run twice, {r.n} member pairs"))
  return out


def transfer_note(seed_refs, reruns) -> str:
  """How each rerun's perplexity noise compares with Fig. 6's seed
  spread."""
  notes = []
  for (arch, reading, q), r in sorted(reruns.items()):
    seed = seed_refs.get((reading, "kappa2", q))
    if q == "valid_ppl" and seed and arch != seed.arch:
      notes.append(f"{r.label}, {rundir.READING_NAMES[reading]}: "
                   f"{r.rel / seed.rel:.1f} x")
  return "; ".join(notes)


def _steps() -> str:
  mins = ", ".join(
      f"{q} {size:.1%} of the larger mean" if kind == "relative"
      else f"{q} {size:g}" + (" nats" if q == "entropy" else "")
      for q, (kind, size) in rs.MIN_EFFECT.items() if q in floors.QUANTITIES)
  return (
      "Each claim is the difference alt - base between members of one seed "
      "(same initialisation and batches). Its verdict, in order: (1) |mean "
      f"difference| below the minimal effect ({mins}) is *no practical "
      "effect*; (2) with two seeds or more, a paired t-test: significant "
      "when the 95% interval mean +- t_{n-1} s / sqrt(n) excludes 0 (t_2 = "
      f"{rs.t_critical(2):.2f}, t_3 = {rs.t_critical(3):.2f}); (3) with one "
      "seed, |difference| against every floor t x rel x max(|base|, |alt|) "
      "the records measure for its reading and contrast: the seed spread "
      "of the figure with the most seeds (t_{n-1}) and the rerun noise of "
      "a paired difference on each architecture rerun in that reading "
      "(rel = the root mean square of the rerun members' relative changes, "
      "t_n over n member pairs; per reading, as the readings' W_QK sit "
      "decades apart; qkspec/report/floors.py). Beyond every floor it is "
      "*indicative (one seed)*; beyond some but not all, *undetermined*: "
      "the records cannot tell which noise holds on its architecture; "
      "else not significant. A cell with no noise measured on its own "
      "architecture and reading is held to the others' (†). C and D are "
      "also judged over training: per seed the difference averaged over "
      f"the evaluations after the first {rs.WARMUP:.0%} of steps, by the "
      "same rules.")


def _families(ev) -> str:
  primary = [t for t in ev.pooled if t.family == "primary"]
  none = [t for t in ev.pooled if t.family == "none"]
  return (
      "Each claim is then pooled over its cells by an exact sign test over "
      "independent units (qkspec/report/pooled.py): one per independent "
      "initialisation (layers, d, seed), as the readings of one program or "
      "seed, or a member trained twice, share theirs. The families are "
      f"fixed in advance: B, C and D pooled over both readings ({len(primary)}"
      " tests) are the primary claims, held to Holm's correction over "
      "them; the none contrast's three pooled over both readings "
      f"({len(none)}) a secondary family with its own Holm; per reading, "
      "per cell, over training and along kappa2 the tests are descriptive; "
      "the superseded stripe test's p-values are in no family.")


def _seeds(ev) -> str:
  seeds = ", ".join(map(str, ev.data_seeds))
  return (f"A seed varies the initialisation and dropout only: data.seed "
          f"= {seeds} in every run, so all seeds and cells see one batch "
          "order (fairseq's --seed also sets the batch order).")


def markdown(ev) -> list[str]:
  """The section's lines after its heading."""
  ratio = transfer_note(ev.seed_refs, ev.reruns)
  return [_steps() + " " + _families(ev) + " " + _seeds(ev), ""] + (
      floor_table(ev.seed_refs, ev.reruns)) + [
          "", "Which way each rule errs:", ""] + [
              f"- {rule}: {how}" + (
                  f"; the rerun noise of perplexity against Fig. 6's seed "
                  f"spread: {ratio}" if rule == "One-seed floors" and ratio
                  else "") + "." for rule, how in ERRS]
