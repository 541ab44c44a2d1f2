r"""A run's start-up, with and without compiling on threads (precompile).

Workload: the Fig. 6 sweep (configs/depth_width.py, L = 1, d = 128, five
kappa2 members; `--model` picks another cell) on a synthetic stream of
WikiText-2's vocabulary size (the cost does not depend on which tokens),
trained for one compiled call (`--steps`, default: its steps per call),
with the log at step 0 and, at the end, an evaluation of `--eval_batches`
batches per split and a checkpoint: every program a run compiles, each run
once. Runs alternate `config.precompile` off and on, `--repeats` times
each, in one process (each builds its own jitted functions, so each
compiles); prints each run's wall time and its phases
(`qkspec.training.phases`), then the medians and their ratio.

  python bench/startup.py [--repeats 2] [--model L=1,d=128]
      [--set model.loss_impl=pallas ...]   # a GPU path's overrides
"""
import argparse
import ast
import json
import os
import shutil
import statistics
import tempfile
import time

from absl import logging

from qkspec.config import args as config_args
from qkspec.config import defaults
from qkspec.training import loop
from qkspec.training import multi_step

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def one_call(c, steps: int = 0):
  """`c` shortened to `steps` steps (0: one compiled call of its steps per
  call), logged, evaluated and checkpointed at the end only."""
  c.num_steps = steps or multi_step.steps_per_call(c)
  c.log_every = c.eval_every = c.checkpoint_every = c.num_steps
  c.progress_every_s = 0.0
  if multi_step.steps_per_call(c) > c.num_steps:
    c.steps_per_call = c.num_steps
  return c


def bench_config(model: str, steps: int, eval_batches: int, overrides: dict):
  """depth_width's `model` cell on synthetic WikiText-2-sized data,
  `one_call`, `eval_batches` batches per split."""
  c = config_args.load_config_file(
      os.path.join(ROOT, "configs", "depth_width.py"), model)
  defaults.synthetic_data(c, vocab_size=33_278, train_tokens=64 * 64 * 8,
                          eval_tokens=64 * 64 * eval_batches)
  c.update_from_flattened_dict(overrides)
  c.eval_max_batches = eval_batches
  return one_call(c, steps)


def one_run(config, precompile: bool) -> tuple[float, dict]:
  """(wall seconds, phases) of training `config` from scratch."""
  config.precompile = precompile
  workdir = tempfile.mkdtemp(prefix="startup_")
  try:
    t = time.perf_counter()
    loop.train_and_evaluate(config, workdir)
    wall = time.perf_counter() - t
    with open(os.path.join(workdir, loop.RUN_INFO)) as f:
      phases = json.loads(f.readline())["phases_s"]
  finally:
    shutil.rmtree(workdir, ignore_errors=True)
  return wall, phases


def compare(make_config, repeats: int, label: str,
            log=print) -> tuple[float, float]:
  """Runs `make_config()` with precompile off, then on, `repeats` times;
  logs each run and the medians; returns (median off, median on)."""
  walls = {False: [], True: []}
  for r in range(repeats):
    for pre in (False, True):
      wall, ph = one_run(make_config(), pre)
      walls[pre].append(wall)
      log(f"startup run {r} precompile={'on ' if pre else 'off'} "
          f"{wall:6.1f} s: " + ", ".join(f"{k} {v:.1f}"
                                         for k, v in ph.items()))
  off, on = statistics.median(walls[False]), statistics.median(walls[True])
  log(f"startup {label}, median of {repeats}: precompile off {off:.1f} s, "
      f"on {on:.1f} s; on / off = {on / off:.2f}x (saves {off - on:.1f} s "
      f"a run)")
  return off, on


def parse_override(kv: str) -> tuple[str, object]:
  """"key=value" -> (key, value as a Python literal, else the string)."""
  k, v = kv.split("=", 1)
  try:
    return k, ast.literal_eval(v)
  except (ValueError, SyntaxError):
    return k, v


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--model", default="L=1,d=128")
  p.add_argument("--steps", type=int, default=0,
                 help="steps trained (0: one call of steps_per_call)")
  p.add_argument("--eval_batches", type=int, default=2)
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--set", nargs="*", default=[],
                 help="config overrides key=value (a GPU path's)")
  a = p.parse_args()
  logging.set_verbosity(logging.WARNING)
  overrides = dict(parse_override(kv) for kv in a.set)
  c = bench_config(a.model, a.steps, a.eval_batches, overrides)
  compare(lambda: bench_config(a.model, a.steps, a.eval_batches, overrides),
          a.repeats, f"{a.model}, {c.num_steps} steps")


if __name__ == "__main__":
  main()
