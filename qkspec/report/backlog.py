"""What the report still lacks: the GPU backlog, in priority order.

1. Fig. 7 with its rho maps kept, both readings: the shift test
   (`stripes`) needs the maps, which the records of the earlier runs lack.
2. The no-LocATER member with `SEEDS` seeds for Fig. 6 and for Fig. 10's
   architecture (L = 6, d = 32), both readings, so that the "none" contrast
   is paired over seeds rather than held to a one-seed floor.
3. Fig. 6 with kappa2 = `STRONG`, strong enough for tr(W_QK) to reach its
   target 1 (W* = cI has trace kappa2 d / (kappa1 + kappa2 d): 0.93 to
   0.999 at d = 128), both readings: is "no effect" a property of the
   paper's kappa2 range?
4. `SEEDS` seeds for Figs. 8-12 (their sweep and no-LocATER member).

`plan` gives each item with the commands that train what is missing and
its projected GPU minutes (`project`): the members it trains x the median
minutes per member of the recorded runs of that architecture nearest to it
in members, on the device most of them ran on (their `run_info.jsonl` wall
time, setup and compilation included).

A seed varies the initialisation and dropout (`config.seed`); the batch
order is `data.seed`'s. A run of one seed S that trains a whole sweep with
its no-LocATER member sets `data.seed = S` (`batch_seed`), so that its
batches vary with the seed as fairseq's `--seed` does. A run whose members
pair with members already trained keeps their `data.seed` (0): a pair needs
one batch order; the seeds of one program share one batch stream.
"""
import dataclasses
import math

import numpy as np

from qkspec.config import args as args_lib
from qkspec.config import defaults
from qkspec.report import commands
from qkspec.report import run_cells
from qkspec.training import sweep as sweep_lib

SEEDS = 3
STRONG = (10.0, 100.0, 1000.0)
GPU = "--config.model.kernels=pallas --config.compute_dtype=bfloat16"
_ARCH = {fig: ld for ld, fig in run_cells.FIGURES.items()}   # fig -> (L, d)
_ARCH["7"] = _ARCH["6"]


def _done(groups, fig, kappa2s, none: bool) -> set[int]:
  """The seeds every wanted group of `fig` has at full length under both
  readings: LocATER at `kappa2s`, and (`none`) the no-LocATER member."""
  readings = tuple(run_cells.READINGS)
  wanted = [(reading, 100.0, k) for reading in readings for k in kappa2s]
  wanted += [(reading, 0.0, 0.0) for reading in readings] if none else []
  have = {}
  for g in groups:
    if g.figure == fig and not g.smoke and (
        g.final_step >= run_cells.PAPER_STEPS):
      have[g.reading, g.kappa1, g.kappa2] = set(g.seeds)
  return set.intersection(*(have.get(w, set()) for w in wanted))


def _args(base: str, missing: set[int]) -> list[str]:
  """`base` with seeds=N where the seeds 0..N-1 are missing, else one
  seed=S (none for seed 0) per missing seed."""
  if len(missing) > 1 and missing == set(range(len(missing))):
    return [_join(base, f"seeds={len(missing)}")]
  return [_join(base, f"seed={s}" if s else "") for s in sorted(missing)]


def _join(*parts: str) -> str:
  return ",".join(p for p in parts if p)


def _item(fig: str, arg: str) -> tuple[str, str, str]:
  """(figure, configs/ file, argument) of one run of figure `fig`."""
  name, parts = commands.config_file(fig, *_ARCH[fig])
  return fig, f"configs/{name}.py", _join(*parts, arg)


def items(groups, stripe_vs) -> list[tuple[str, list[tuple[str, str, str]]]]:
  """(what, [`_item`]) of each backlog item not done, over the member
  `groups` and Fig. 7's `stripes.StripeVerdict`s."""
  readings = tuple(run_cells.READINGS)
  seeds = set(range(SEEDS))
  out = []
  maps = {v.reading for v in stripe_vs if not v.kept
          and v.steps >= run_cells.PAPER_STEPS}
  if maps != set(readings):
    out.append(("Fig. 7 with the rho maps kept, both readings (the shift "
                "test needs them)", [_item("7", "both_readings")]))
  paired = _runs(groups, "6", (), seeds) + _runs(groups, "10", (1.0,), seeds)
  if paired:
    out.append((f"the no-LocATER member with {SEEDS} seeds for Fig. 6 and "
                "Fig. 10's architecture, both readings, so that the none "
                "contrast is paired", paired))
  strong = "kappa2=" + ",".join(f"{k:g}" for k in STRONG)
  missing = seeds - _done(groups, "6", STRONG, False)
  if missing:
    out.append((f"Fig. 6 with kappa2 = {', '.join(f'{k:g}' for k in STRONG)}"
                ", both readings, until tr(W_QK) reaches its target", [
                    _item("6", a) for a in _args(
                        f"{strong},both_readings", missing)]))
  listed = {c for _, cs in out for c in cs}
  more = [c for fig in ("6", "8", "9", "10", "11", "12")
          for c in _runs(groups, fig, defaults.KAPPA2_SWEEP, seeds)
          if c not in listed]
  if more:
    figs = ", ".join(dict.fromkeys(fig for fig, _, _ in more))
    out.append((f"{SEEDS} seeds for Fig{'s' * (len(more) > 1)}. {figs} "
                "(sweep and no-LocATER member, both readings)", more))
  return out


def _runs(groups, fig, kappa2s, seeds) -> list[tuple[str, str, str]]:
  """The runs that give figure `fig` `seeds` of its LocATER groups at
  `kappa2s` and of its no-LocATER member, both readings: the sweep with
  that member where the sweep lacks a seed, the member alone where only
  it does."""
  sweep = seeds - _done(groups, fig, kappa2s, False) if kappa2s else set()
  none = seeds - _done(groups, fig, (), True) - sweep
  return ([_item(fig, a) for a in _args("both_readings,contrast", sweep)]
          + [_item(fig, a) for a in _args("none", none)])


def _walls(runs) -> list[tuple[str, tuple[int, int], int, float]]:
  """(device, (layers, d), members, wall minutes) of each recorded
  full-length run that ran on one device (`run_cells.Run.wall_minutes`)."""
  per_path = {}
  for r in runs:
    if not r.smoke and r.final_step >= run_cells.PAPER_STEPS:
      n, _ = per_path.get(r.path, (0, r))
      per_path[r.path] = (n + len(r.members), r)
  return [(r.devices[0], r.arch, n, r.wall_minutes)
          for _, (n, r) in sorted(per_path.items())
          if len(r.devices) == 1 and n and r.wall_minutes]


def project(walls, n: int) -> float:
  """Minutes for `n` members: n x the median minutes per member of the
  recorded runs `walls` [(members, minutes)] nearest to n in members (NaN
  without any)."""
  if not walls:
    return math.nan
  near = min(abs(m - n) for m, _ in walls)
  return n * float(np.median([w / m for m, w in walls if abs(m - n) == near]))


def batch_seed(arg: str) -> int:
  """The `data.seed` of a backlog run: S for one seed S's whole sweep
  with its no-LocATER member, else 0 (see the module doc)."""
  words = arg.split(",")
  seed = next((int(w[len("seed="):]) for w in words
               if w.startswith("seed=")), 0)
  return seed if "contrast" in words else 0


def command(fig: str, path: str, arg: str) -> str:
  """The launch command of one backlog run, its workdir named after it."""
  words = [f"fig{fig}"] + [
      "kappa2_" + t[len("kappa2="):] if t.startswith("kappa2=")
      else t.replace("=", "") for t in arg.split(",")
      if t and not t.startswith(("L=", "d="))]
  config = path + (f":{arg}" if arg else "")
  data = f" --config.data.seed={batch_seed(arg)}" * bool(batch_seed(arg))
  return (f"python launch/train.py --config {config} {GPU}{data} --workdir "
          f"runs/{'_'.join(words)}")


@dataclasses.dataclass(frozen=True)
class Item:
  """One backlog item: what it gives, its commands, its minutes."""
  what: str
  figures: tuple[str, ...]
  commands: tuple[str, ...]
  minutes: float               # projected; NaN with no run to project from


@dataclasses.dataclass(frozen=True)
class Backlog:
  """The backlog in priority order, projected on `device`."""
  items: tuple[Item, ...]
  device: str
  slower: tuple[float, ...]    # other devices' minutes per member / these


def _slower(walls, device) -> tuple[float, ...]:
  """Each run on another device: its minutes per member over the median
  of `device`'s runs of its architecture and members (where any)."""
  out = []
  for dev, arch, n, wall in walls:
    same = [w / m for d, a, m, w in walls if (d, a, m) == (device, arch, n)]
    if dev != device and same:
      out.append(wall / n / float(np.median(same)))
  return tuple(sorted(out))


def plan(groups, stripe_vs, runs) -> Backlog:
  """The `Backlog` of the member `groups`, Fig. 7's stripe verdicts and
  the `runs` whose wall times project its minutes."""
  walls = _walls(runs)
  devices = [dev for dev, *_ in walls]
  device = max(sorted(set(devices)), key=devices.count) if devices else ""
  mine = {}
  for dev, arch, n, wall in walls:
    if dev == device:
      mine.setdefault(arch, []).append((n, wall))
  out = []
  for what, configs in items(groups, stripe_vs):
    minutes = 0.0
    for fig, path, arg in configs:
      config = args_lib.load_config_file(commands.REPO / path, arg or None)
      minutes += project(mine.get((config.model.num_layers,
                                   config.model.d_model)),
                         len(sweep_lib.members(config)))
    out.append(Item(what=what, figures=tuple(fig for fig, _, _ in configs),
                    commands=tuple(command(*c) for c in configs),
                    minutes=minutes))
  return Backlog(items=tuple(out), device=device,
                 slower=_slower(walls, device))
