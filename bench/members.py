r"""A sweep's members sharded over the devices vs replicated on every device.

Workload: the LM smoke sweep (`configs/locater_wt2.py:smoke`: 5 kappa2
members, d = 16, T = 8, batch 8, synthetic data), single train steps.
For each device count (simulated CPU devices, one child process each,
`--xla_force_host_platform_device_count`) it times the sweep with
`sweep.shard_members` True (a ("members", "data") mesh, members padded to
a multiple of the groups, `qkspec.training.sweep.Layout`) and False (a
("data",) mesh, every device holding all members), in turn, and prints
member-steps/s (real members x steps / s), sharded / replicated, and each
against the first device count's replicated run.

  python bench/members.py [--devices 1,2,4] [--steps 100] [--repeats 5]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import jax

from qkspec.config import defaults
from qkspec.training import step as step_lib
from qkspec.training import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# Steps queued at most before waiting for them: ~100 multi-device steps in
# flight can stall simulated CPU devices in a collective (XLA:CPU's
# rendezvous), whether members are sharded or not.
QUEUE = 20


class Sweep:
  """Calling it trains `steps` single steps of the LM smoke sweep."""

  def __init__(self, shard: bool, steps: int):
    c = defaults.load_config_file(
        os.path.join(ROOT, "configs", "locater_wt2.py"), "smoke")
    c.sweep.shard_members = shard
    self.plan = sweep.make_plan(c)
    self.built = step_lib.build_steps(self.plan)
    init_keys, self.keys, hparams = step_lib.member_inputs(self.plan)
    self.state = self.built.init(init_keys, hparams)
    self.batches = [self.built.task.train_batch(i) for i in range(steps)]

  def __call__(self):
    for i, batch in enumerate(self.batches, 1):
      self.state, metrics = self.built.train(self.state, batch, self.keys)
      if i % QUEUE == 0 or i == len(self.batches):
        jax.block_until_ready(metrics)


def child(devices: int, steps: int, repeats: int) -> dict:
  """{"sharded" | "replicated": (layout, member-steps/s)} on `devices`,
  timed in turn (best of `repeats` each), so the machine's load falls on
  both."""
  assert jax.device_count() == devices, jax.devices()
  runs = {"sharded": Sweep(True, steps), "replicated": Sweep(False, steps)}
  best = {}
  for name, run in runs.items():
    run()                                     # compile, warm up
    best[name] = float("inf")
  for _ in range(repeats):
    for name, run in runs.items():
      t0 = time.perf_counter()
      run()
      best[name] = min(best[name], time.perf_counter() - t0)
  return {name: (list(run.plan.layout),
                 run.plan.layout.members * steps / best[name])
          for name, run in runs.items()}


def measure(devices: int, steps: int, repeats: int) -> dict:
  """`child` in a fresh process with `devices` simulated CPU devices."""
  flag = f"--xla_force_host_platform_device_count={devices}"
  env = {**os.environ, "JAX_PLATFORMS": "cpu",
         "XLA_FLAGS": " ".join(x for x in (os.environ.get("XLA_FLAGS"), flag)
                               if x)}
  r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                      str(devices), "--steps", str(steps), "--repeats",
                      str(repeats)], env=env, capture_output=True, text=True,
                     check=False)
  if r.returncode:
    raise RuntimeError(f"{devices} devices failed:\n{r.stderr[-4000:]}")
  return json.loads(r.stdout.strip().splitlines()[-1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--devices", default="1,2,4",
                      help="simulated CPU device counts; the first is the "
                      "reference")
  parser.add_argument("--steps", type=int, default=100, help="steps timed")
  parser.add_argument("--repeats", type=int, default=5, help="best of")
  parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    print(json.dumps(child(args.child, args.steps, args.repeats)))
    return
  counts = [int(d) for d in args.devices.split(",")]
  print(f"CPU, {len(os.sched_getaffinity(0))} cores, jax {jax.__version__}; "
        f"LM smoke sweep, 5 members, {args.steps} steps, best of "
        f"{args.repeats}")
  results = {d: measure(d, args.steps, args.repeats) for d in counts}
  ref = results[counts[0]]["replicated"][1]
  for d in counts:
    (lay, sharded), (_, replicated) = (results[d]["sharded"],
                                       results[d]["replicated"])
    print(f"{d} devices, (N, m, data) = {tuple(lay)}: sharded "
          f"{sharded:6.0f} member-steps/s, replicated {replicated:6.0f}; "
          f"sharded / replicated = {sharded / replicated:4.2f}x; vs "
          f"{counts[0]} device(s) {sharded / ref:4.2f}x sharded, "
          f"{replicated / ref:4.2f}x replicated")


if __name__ == "__main__":
  main()
