"""Planted inputs of the report's tests: small synthetic records (runs and
their members, as `run_cells.load_runs` reads them), member groups, the
evidence they add up to, members over training and Fig. 7's rho maps."""
import math

import numpy as np

from qkspec.report import backlog
from qkspec.report import evidence
from qkspec.report import floors
from qkspec.report import pooled
from qkspec.report import run_cells
from qkspec.report import verdicts

SEED_LEVEL = {"scale": 0.27, "entropy": 2.8, "valid_ppl": 240.0}
LEVEL = {**SEED_LEVEL, "test_ppl": 220.0, "trace": 0.4}
KEYS = {name: key for name, key, _ in run_cells.QUANTITIES}
ARCH = {**{f"Fig. {fig}": arch for arch, fig in run_cells.FIGURES.items()},
        "Fig. 7": (1, 128)}


def member(kappa1, kappa2, seed=0, step=50_000, reading="mean_loss",
           **finals) -> dict:
  """A member (rundir's form) whose final values are `LEVEL` x (1 + 0.01
  seed), or `finals` (quantity -> value) where given."""
  values = {q: finals.get(q, level * (1 + 0.01 * seed))
            for q, level in LEVEL.items()}
  return dict(seed=seed, kappa1=kappa1, kappa2=kappa2, target=1.0,
              penalty_added_to=reading,
              metrics={KEYS[q]: (np.asarray([step]), np.asarray([v]))
                       for q, v in values.items()})


def run(run_dir, members, label="Fig. 6", reading="mean_loss",
        both_readings=False, arch=None, info=(), record=None
        ) -> run_cells.Run:
  """A `run_cells.Run` as `load_runs` gives it, of `members` (`member`):
  each with its last step, final values, run and key."""
  layers, d = arch or ARCH.get(label, (1, 128))
  ms = []
  for i, m in enumerate(members):
    steps = [int(s[-1]) for s, _ in m["metrics"].values() if len(s)]
    ms.append(dict(m, run_dir=run_dir, key=(run_dir, i),
                   last_step=m.get("last_step", max(steps, default=0)),
                   final={q: float(m["metrics"][k][1][-1])
                          if k in m["metrics"] else math.nan
                          for q, k in KEYS.items()}))
  config = dict(model=dict(num_layers=layers, d_model=d),
                data=dict(seq_len=64, seed=0), num_steps=50_000,
                locater=dict(penalty_added_to=reading))
  return run_cells.Run(run_dir=run_dir, path=run_dir, config=config,
                       record=({"command": f"train {run_dir}"}
                               if record is None else record),
                       info=tuple(info), reading=reading, members=tuple(ms),
                       both_readings=both_readings,
                       figure=label.split()[1], smoke=False)


def sweep(run_dir, label, diffs=None, seed=0, readings=("mean_loss",),
          none=False, **kw) -> list[run_cells.Run]:
  """One program of `label`: kappa2 = 0 and 1 at kappa1 = 100 under each of
  `readings` (one `Run` each, as a both-readings program loads), kappa2 = 1
  moved by `diffs` (reading -> quantity -> difference; one dict for all),
  and (`none`) a no-LocATER member under the first reading."""
  out = []
  for reading in readings:
    d = (diffs or {}).get(reading, diffs or {}) if diffs else {}
    d = {q: v for q, v in d.items() if q in LEVEL}
    ms = [member(100.0, 0.0, seed, reading=reading),
          member(100.0, 1.0, seed, reading=reading, **{
              q: LEVEL[q] * (1 + 0.01 * seed) + v for q, v in d.items()})]
    if none and reading == readings[0]:
      ms.append(member(0.0, 0.0, seed, reading=reading))
    out.append(run(run_dir, ms, label, reading,
                   both_readings=len(readings) > 1, **kw))
  return out


def evidence_of(runs, replicates=()) -> evidence.Evidence:
  """The `evidence.Evidence` of `runs` that the first screen reads: cells,
  floors, verdicts and pooled tests (no trends, stripes, W* or backlog)."""
  cells = run_cells.cells(runs)
  seed_refs = floors.seed_references(cells)
  reruns = floors.rerun_references(floors.pairs(runs, replicates))
  vs = verdicts.verdicts(cells, floors.candidates(seed_refs, reruns))
  return evidence.Evidence(
      runs=tuple(runs), commands={}, cells=cells, groups=(),
      seed_refs=seed_refs, reruns=reruns, spread={}, rerun_pairs=(),
      verdicts=vs, trends=(), pooled=pooled.claim_tests(vs),
      stripe_results={}, stripes=(), minimum=(),
      backlog=backlog.Backlog(items=(), device="", slower=()))


def seed_group(kappa2, deltas, label="Fig. 6", kappa1=100.0,
               reading="mean_loss", seeds=None, arch=None
               ) -> run_cells.Group:
  """A group whose per-seed values are `SEED_LEVEL` x (1 + 0.01 seed) +
  `deltas` (quantity -> a difference, or one per seed)."""
  seeds = list(seeds or [0])
  layers, d = arch or ARCH.get(label, (1, 128))
  values = {}
  for q, level in SEED_LEVEL.items():
    ds = np.broadcast_to(deltas.get(q, 0.0), (len(seeds),))
    values[q] = tuple(level * (1 + 0.01 * s) + x for s, x in zip(seeds, ds))
  return run_cells.group(
      values, figure=label.split()[1], smoke=False,
      reading=reading, run_dirs=(label,), d_model=d, num_layers=layers,
      seq_len=64, kappa1=kappa1, kappa2=kappa2, target=1.0,
      seeds=tuple(seeds), final_step=50_000, num_steps=50_000)


def cells_of(groups) -> dict:
  """(label, reading) -> a `run_cells.Cell` of the `groups` alone (no
  runs or members), in figure order."""
  by_cell = {}
  for g in groups:
    by_cell.setdefault((g.label, g.reading), []).append(g)
  return {key: run_cells.Cell(
      label=key[0], figure=gs[0].figure, reading=key[1], runs=(),
      counted=(), left_out=(), groups=tuple(gs),
      contrasts=run_cells.contrasts(gs))
          for key, gs in sorted(by_cell.items(),
                                key=lambda kv: run_cells.cell_order(kv[0]))}


def gap_member(kappa1, kappa2, ppl, entropy=2.8, steps=(0, 10, 20)) -> dict:
  """A member whose valid ppl over `steps` is `ppl`, its entropy flat."""
  return dict(kappa1=kappa1, kappa2=kappa2, target=1.0, seed=0,
              metrics={"valid/ppl": (list(steps), list(ppl)),
                       "mean/entropy": (list(steps), [entropy] * len(steps))})


# Fig. 7's rho maps: RHO_S logged steps x RHO_T key positions.
RHO_S, RHO_T = 40, 32
RHO_X = np.arange(RHO_T) / (RHO_T - 1)           # positions in [0, 1]


def rho_map(profile, noise=0.1, seed=1) -> np.ndarray:
  """rho_SxT: `profile` (over positions, or [S, T]) + noise, clipped."""
  rng = np.random.default_rng(seed)
  return np.clip(profile + noise * rng.standard_normal((RHO_S, RHO_T)), 0, 1)


def striped_profile() -> np.ndarray:
  """A couple of light and dark stripes on a uniform 0.4."""
  i = np.arange(RHO_T)
  return np.where(np.isin(i, (5, 11)), 0.8, np.where(i == 20, 0.1, 0.4))
