r"""A 5-member kappa2 sweep as one vmapped program vs 5 sequential runs.

Workload: the d = 32 WikiText-2-sized LM (L = 1, H = 1, vocabulary 33,278,
T = 64, batch 64, lr 1e-4, kappa1 = 100, kappa2 in {0, 1e-3, 1e-2, 1e-1,
1}), a fixed number of train steps after compilation. The tokens are a
synthetic stream of the real vocabulary size (the step's cost does not
depend on which tokens they are). Prints, from one process, the sweep's
throughput in member-steps per second with its members vmapped
(`sweep.member_batch=0`) and looped inside the compiled step
(`member_batch=1`, the CPU default), that of 5 sequential runs, and ratios.

  python bench/sweep.py [--steps 5]
"""
import argparse
import time

from qkspec.config import defaults
from qkspec.training import step as step_lib
from qkspec.training import sweep as sweep_lib

KAPPA2 = (0.0, 1e-3, 1e-2, 1e-1, 1.0)


def _config(kappa2: tuple[float, ...] = (), alone: float = 0.0,
            member_batch: int = 0):
  """The sweep over `kappa2`, or (empty) one run with kappa2 = `alone`."""
  c = defaults.lm_config()
  c.sweep.member_batch = member_batch
  defaults.synthetic_data(c, vocab_size=33_278, train_tokens=64 * 64 * 8,
                            eval_tokens=64 * 64)
  c.model.d_model = c.model.ffn_dim = 32
  c.opt.lr = 1e-4
  c.locater.kappa1 = 100.0
  c.locater.kappa2 = alone
  c.sweep.kappa2 = kappa2
  return c


def member_steps_per_second(config, steps):
  """Compiles, runs one warm-up step, then times `steps` steps.

  Returns (member-steps/s after compilation, wall seconds from building the
  step to the last step, compilation and the warm-up step included).
  """
  start = time.perf_counter()
  built = step_lib.build_steps(config)
  members = sweep_lib.members(config)
  init_keys, dropout_keys, hparams = step_lib.member_inputs(
      members, sweep_lib.is_sweep(config))
  state = built.init(init_keys, hparams)
  batches = [built.task.train_batch(i) for i in range(steps + 1)]
  state, metrics = built.train(state, batches[0], dropout_keys)
  metrics["loss"].block_until_ready()
  t0 = time.perf_counter()
  for batch in batches[1:]:
    state, metrics = built.train(state, batch, dropout_keys)
  metrics["loss"].block_until_ready()
  end = time.perf_counter()
  return len(members) * steps / (end - t0), end - start


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--steps", type=int, default=5)
  args = parser.parse_args()
  vmapped, vmapped_wall = member_steps_per_second(_config(KAPPA2),
                                                  args.steps)
  looped, looped_wall = member_steps_per_second(
      _config(KAPPA2, member_batch=1), args.steps)
  runs = [member_steps_per_second(_config(alone=k), args.steps)
          for k in KAPPA2]
  sequential = len(KAPPA2) / sum(1 / rate for rate, _ in runs)
  sequential_wall = sum(wall for _, wall in runs)
  n = len(KAPPA2)
  print(f"member-steps/s after compilation, and wall time for {args.steps} "
        f"steps (+1 warm-up) including compilation:")
  print(f"  sweep, {n} members vmapped (member_batch=0): {vmapped:6.3f}  "
        f"{vmapped_wall:6.1f} s")
  print(f"  sweep, {n} members looped  (member_batch=1): {looped:6.3f}  "
        f"{looped_wall:6.1f} s")
  print(f"  {n} sequential runs:                       {sequential:6.3f}  "
        f"{sequential_wall:6.1f} s")
  print(f"vmapped / sequential: {vmapped / sequential:.2f}x   looped / "
        f"sequential: {looped / sequential:.2f}x   (wall: "
        f"{sequential_wall / vmapped_wall:.2f}x and "
        f"{sequential_wall / looped_wall:.2f}x)")


if __name__ == "__main__":
  main()
