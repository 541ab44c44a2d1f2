r"""The paper's Figs. 6 and 8-12 trained on one GPU, each figure timed.

Fig. 6 is configs/locater_wt2.py (L = 1, d = 128); Figs. 8-12 are
configs/depth_width.py at L=1,d=32 / L=3,d=32 / L=6,d=32 / L=3,d=128 /
L=6,d=128. Each is the kappa2 sweep (five members in one vmapped
program), 50,000 steps, on the kept GPU path (`KEPT`: the Pallas kernels,
bfloat16 compute), steps per call left at the config's (auto: 250 on a
GPU).

  python bench/gpu_figures.py --tfds_dir DIR --manual_dir WIKITEXT_DIR \
      [--figs 6,8,9,10,11,12] [--reading literal|fairseq|both] \
      [--workdir runs/gpu_figures] [--steps 50000] [--time_budget_s S]

Each figure trains in WORKDIR/figN (figN_fairseq, figN_both) through
`qkspec.training.loop.train_and_evaluate`, which resumes from the
checkpoint there: rerunning the same command goes on where it stopped.

Prints, per figure: before it, the projected time of its steps, from a
probe that trains --probe_steps steps of the same config in
WORKDIR/probe/figN and times the steps after the first call compiled
(the loop's "steps" phase in run_info.jsonl; setup, compilation and
evaluation come on top); after it, the measured wall time and the steps/s
of the same phase. At the end one line per figure and the total, each
with the device kind. When --time_budget_s runs out the process sends
itself SIGINT: the loop saves a checkpoint at the next step boundary and
stops, and a rerun goes on.

--rehearse trains the configs' `smoke` variants (a few steps on synthetic
data) on a CPU, about a minute a figure (mostly compilation), e.g.
`python bench/gpu_figures.py --rehearse --kernels xla --figs 8`.
"""
import argparse
import json
import os
import shutil
import signal
import threading
import time

from absl import logging
import jax

from qkspec.config import args as config_args
from qkspec.training import loop
from qkspec.training import preemption
from qkspec.training import progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEPT = {"model.kernels": "pallas", "compute_dtype": "bfloat16"}  # GPU path
FIGS = {     # figure -> (config file in configs/, its argument)
    6: ("locater_wt2.py", ""),
    8: ("depth_width.py", "L=1,d=32"),
    9: ("depth_width.py", "L=3,d=32"),
    10: ("depth_width.py", "L=6,d=32"),
    11: ("depth_width.py", "L=3,d=128"),
    12: ("depth_width.py", "L=6,d=128"),
}
READINGS = {"literal": "", "fairseq": "fairseq", "both": "both_readings"}


def parse_flags(argv: list[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--tfds_dir", default="",
                 help="config.data.data_dir: where tfds keeps the prepared "
                 "WikiText-2 (\"\": $TFDS_DATA_DIR or ~/tensorflow_datasets)")
  p.add_argument("--manual_dir", default="",
                 help="config.data.manual_dir: the three WikiText-2 token "
                 "files (\"\": tfds downloads them)")
  p.add_argument("--workdir", default="runs/gpu_figures")
  p.add_argument("--figs", default="6,8,9,10,11,12",
                 help=f"figures to train, of {', '.join(map(str, FIGS))}")
  p.add_argument("--reading", default="literal", choices=list(READINGS),
                 help="how kappa is read: literal (as printed), fairseq "
                 "(the configs' `fairseq`), both (`both_readings`: the two "
                 "side by side in one program)")
  p.add_argument("--steps", type=int, default=0,
                 help="config.num_steps (0: the config's, 50,000)")
  p.add_argument("--kernels", default=KEPT["model.kernels"],
                 choices=("xla", "pallas"), help="config.model.kernels "
                 "(xla: the XLA model, e.g. for a CPU rehearsal)")
  p.add_argument("--probe_steps", type=int, default=1000,
                 help="steps of each figure's probe (0: no probe and no "
                 "projection)")
  p.add_argument("--time_budget_s", type=float, default=0,
                 help="stop (checkpointed) after this many seconds (0: no "
                 "limit)")
  p.add_argument("--rehearse", action="store_true",
                 help="the configs' smoke variants: a few steps on "
                 "synthetic data, for a CPU")
  flags = p.parse_args(argv)
  try:
    flags.figs = [int(f) for f in flags.figs.split(",")]
  except ValueError:
    flags.figs = [None]
  if not set(flags.figs) <= set(FIGS):
    p.error(f"--figs takes figures of {', '.join(map(str, FIGS))}, "
            f"comma-separated")
  if flags.steps < 0 or flags.probe_steps < 0 or flags.time_budget_s < 0:
    p.error("--steps, --probe_steps and --time_budget_s must be >= 0")
  if flags.rehearse:
    flags.probe_steps = min(flags.probe_steps, 4)
  return flags


def fig_config(fig: int, flags: argparse.Namespace):
  """Figure `fig`'s config with the kept path, the data dirs and --steps."""
  file, cell = FIGS[fig]
  arg = ",".join(a for a in (cell, READINGS[flags.reading],
                             "smoke" * flags.rehearse) if a)
  c = config_args.load_config_file(os.path.join(ROOT, "configs", file),
                                   arg or None)
  c.update_from_flattened_dict(dict(KEPT, **{"model.kernels":
                                            flags.kernels}))
  c.data.data_dir = flags.tfds_dir
  c.data.manual_dir = flags.manual_dir
  if flags.steps:
    c.num_steps = flags.steps
  return c


def fig_workdir(fig: int, flags: argparse.Namespace) -> str:
  suffix = "" if flags.reading == "literal" else f"_{flags.reading}"
  return os.path.join(flags.workdir, f"fig{fig}{suffix}")


def steps_done(workdir: str) -> int:
  """The step of the newest checkpoint in `workdir` (0: none)."""
  ckpt = os.path.join(workdir, "ckpt")
  if not os.path.isdir(ckpt):
    return 0
  return max((int(s) for s in os.listdir(ckpt) if s.isdigit()), default=0)


def last_invocation(workdir: str) -> dict | None:
  """The newest line of the loop's `workdir`/run_info.jsonl, if any."""
  path = os.path.join(workdir, progress.RUN_INFO)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    lines = f.read().splitlines()
  return json.loads(lines[-1]) if lines else None


def steps_rate(info: dict | None) -> float:
  """Steps/s of an invocation after its first call compiled (the loop's
  "steps" phase); nan where it has none."""
  seconds = (info or {}).get("phases_s", {}).get("steps", 0)
  return (info["end_step"] - info["start_step"]) / seconds if seconds else (
      float("nan"))


def probe_rate(c, workdir: str, steps: int) -> float:
  """Steps/s of `steps` steps of config `c`, trained afresh in `workdir`."""
  shutil.rmtree(workdir, ignore_errors=True)
  c = c.copy_and_resolve_references()
  c.num_steps, c.eval_max_batches = steps, 1
  loop.train_and_evaluate(c, workdir)
  rate = steps_rate(last_invocation(workdir))
  shutil.rmtree(workdir)        # a d = 128 sweep's checkpoint is ~0.5 GB
  return rate


def stop_after(seconds: float) -> threading.Timer:
  """Sends this process SIGINT after `seconds`: the loop saves a checkpoint
  at the next step boundary and raises `preemption.Interrupted`."""
  timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
  timer.daemon = True
  timer.start()
  return timer


def train_fig(fig: int, flags: argparse.Namespace, kind: str,
              out: dict) -> None:
  """Trains figure `fig` on (resumable), printing its projection and timing.

  Fills `out`, also when interrupted: the steps reached of its total, wall
  seconds and steps/s after compiling (nan where nothing was trained)."""
  c, workdir = fig_config(fig, flags), fig_workdir(fig, flags)
  start = steps_done(workdir)
  out.update(fig=fig, steps=start, total=c.num_steps, wall=0.0,
             rate=float("nan"))
  if start >= c.num_steps:
    print(f"fig {fig}: at step {start} of {c.num_steps} already: nothing "
          f"left to train [{kind}]", flush=True)
    return
  todo = c.num_steps - start
  if flags.probe_steps:
    rate = probe_rate(c, os.path.join(flags.workdir, "probe", f"fig{fig}"),
                      flags.probe_steps)
    projected = (f"projected {todo / rate:.1f} s of steps at {rate:.1f} "
                 f"steps/s" if rate > 0 else "no projection (the probe's "
                 "steps took under 0.1 s)")
    print(f"fig {fig}: {todo} steps from step {start}, {projected} (a "
          f"{flags.probe_steps}-step probe, after its first call compiled; "
          f"setup, compilation and evaluation extra) [{kind}]", flush=True)
  t = time.perf_counter()
  try:
    loop.train_and_evaluate(c, workdir)
  finally:            # interrupted too: what it trained until then
    out.update(steps=steps_done(workdir), wall=time.perf_counter() - t,
               rate=steps_rate(last_invocation(workdir)))
    print(f"fig {fig}: {out['steps'] - start} steps in {out['wall']:.1f} s "
          f"wall, {out['rate']:.1f} steps/s after compiling; at step "
          f"{out['steps']} of {c.num_steps} [{kind}]", flush=True)


def main(argv: list[str] | None = None) -> list[dict]:
  flags = parse_flags(argv)
  logging.set_verbosity(logging.INFO)     # the loop's progress lines
  kind = jax.devices()[0].device_kind
  os.makedirs(flags.workdir, exist_ok=True)
  # A rerun reads the programs compiled before (a run those of its probe,
  # compiled in this process).
  jax.config.update("jax_compilation_cache_dir",
                    os.path.join(flags.workdir, "jax_cache"))
  print(f"figs {','.join(map(str, flags.figs))}, reading {flags.reading}, "
        f"on {jax.device_count()} x {kind}, jax {jax.__version__}",
        flush=True)
  t = time.perf_counter()
  timer = stop_after(flags.time_budget_s) if flags.time_budget_s else None
  done = []
  try:
    for fig in flags.figs:
      done.append({})
      train_fig(fig, flags, kind, done[-1])
  # preemption.Interrupted (a KeyboardInterrupt) once the loop saved a
  # checkpoint; a plain one where SIGINT came outside its training.
  except KeyboardInterrupt as e:
    if not flags.time_budget_s or (
        time.perf_counter() - t < flags.time_budget_s):
      raise                         # Ctrl-C
    saved = f" ({e.what})" if isinstance(e, preemption.Interrupted) else ""
    print(f"stopped by the time budget{saved}; rerun to go on", flush=True)
  finally:
    if timer is not None:
      timer.cancel()
  wall = time.perf_counter() - t
  for r in filter(None, done):   # empty: stopped before its first step
    print(f"fig {r['fig']:2d}  {r['steps']:6d} of {r['total']} steps  "
          f"{r['wall']:7.1f} s  {r['rate']:7.1f} steps/s  [{kind}]")
  finished = sum(r.get("steps", 0) >= r.get("total", 1) for r in done)
  print(f"total: {finished} of {len(flags.figs)} figures trained through, "
        f"{wall:.1f} s ({wall / 60:.1f} min)  [{kind}]", flush=True)
  return done


if __name__ == "__main__":
  main()
