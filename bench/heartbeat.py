r"""What a multi-host run's peer timeout must outlast, measured on a config.

  python bench/heartbeat.py --config configs/locater_wt2.py:smoke
  python bench/heartbeat.py --config configs/locater_wt2.py \
      --config.data.manual_dir=../shared/data/wikitext-2 \
      --config.data.data_dir=/tmp/tfds --config.eval_max_batches=2

Trains `--steps` steps of the config in a fresh workdir, in this process,
with a checkpoint, a log and an evaluation every 2 steps, while a thread
that wakes every 50 ms, as `qkspec.runtime.peers` does to beat, records
how late each wake-up comes (the time Python's lock kept it waiting).
Prints the compilation, a step, a checkpoint write (its blocking part,
then saved to the end), an evaluation, and the longest wait of the
thread, each in seconds, and how many times that wait fits in the default
`--peer_timeout_s`. The heartbeat runs on its own thread, so only that
wait, not a step or a compilation, can make a living process look lost.
"""
import json
import os
import tempfile
import threading
import time

from absl import app
from absl import flags
import jax
from ml_collections import config_flags

from qkspec.runtime import peers
from qkspec.training import checkpoint
from qkspec.training import loop

_CONFIG = config_flags.DEFINE_config_file("config", None, "A training "
                                          "config.", lock_config=False)
_STEPS = flags.DEFINE_integer("steps", 6, "Steps to train.")
_TICK_S = 0.05


class _Ticker:
  """A thread waking every `_TICK_S`; `longest`: its latest wake-up."""

  def __init__(self):
    self.longest, self._stop = 0.0, threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)

  def _run(self):
    while True:
      before = time.monotonic()
      if self._stop.wait(_TICK_S):
        return
      self.longest = max(self.longest, time.monotonic() - before - _TICK_S)

  def __enter__(self):
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()


def main(argv):
  del argv
  c = _CONFIG.value
  c.num_steps, c.progress_every_s = _STEPS.value, 0.0
  c.log_every = c.eval_every = c.checkpoint_every = 2
  with tempfile.TemporaryDirectory() as workdir, _Ticker() as ticker:
    state = loop.train_and_evaluate(c, workdir)
    with open(os.path.join(workdir, "run_info.jsonl")) as f:
      phases = json.loads(f.readline())["phases_s"]
    ckpt = checkpoint.Checkpointer(workdir)
    start = time.perf_counter()
    ckpt.save(c.num_steps + 1, jax.tree.map(lambda x: x, state))
    ckpt.wait_until_finished()
    write_s = time.perf_counter() - start
    ckpt.close()
  saves = c.num_steps // 2
  print(f"device {jax.devices()[0].device_kind}, {jax.device_count()} "
        f"device(s), {c.model.d_model} wide, {len(c.sweep.kappa2) or 1} "
        f"member(s)")
  print(f"compile {phases['compile']:.1f} s; step "
        f"{phases['steps'] / max(c.num_steps - 1, 1):.2f} s; checkpoint "
        f"{phases['checkpoint'] / saves:.2f} s (whole write {write_s:.2f} s)"
        f"; eval {phases['eval'] / (saves + 1):.2f} s; setup "
        f"{phases['setup']:.1f} s")
  print(f"longest heartbeat wait {ticker.longest:.2f} s: "
        f"{peers.TIMEOUT_S / max(ticker.longest, 1e-3):.0f} x within the "
        f"default --peer_timeout_s={peers.TIMEOUT_S:g}")


if __name__ == "__main__":
  app.run(main)
