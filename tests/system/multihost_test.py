"""Two processes (2 CPU devices each) train as one process with 4 devices.

`launch/train.py` runs three times at once on 127.0.0.1: once as a single
process with 4 simulated CPU devices and one step per compiled call, and
twice as processes 0 and 1 of a 2-process run (`--coordinator_address
--num_processes --process_id`, 2 devices each, gloo CPU collectives, one
shared workdir) with two steps per call, the accelerators' path (batches
gathered on the devices, `qkspec.training.multi_step`). The 2-process run
must log the same losses and measurements, save the same parameters, write
each checkpoint once and its metrics from process 0 only (a second writer
would append every record twice to the shared metrics.jsonl).

SIGTERM to one process of two stops both at the same step with one
checkpoint there (JAX's preemption sync point), and both resume from it.
SIGKILL to one (process 1, or process 0, the coordinator) makes the other
exit within --peer_timeout_s with status 75 and one line naming the lost
process and the last checkpoint; both resume from that checkpoint.
"""
import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np
import orbax.checkpoint as ocp

import testutil

_TIMEOUT_S = 420
# A one-member LM smoke run (kappa2 = 1: the penalty is on) of 4 steps,
# logged, evaluated and saved at steps 2 and 4.
_FLAGS = ("--config", "configs/locater_wt2.py:smoke",
          "--config.sweep.kappa2=()", "--config.locater.kappa2=1.0")
# Timings differ between runs; the key bias has no gradient, so its Adam
# update is summation-order noise (tests/training/sweep_test.py).
_UNEQUAL = ("steps_per_sec",)
_NOISE = "['key']['bias']"


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _start(workdir, devices, *extra, tag="", config=_FLAGS):
  """Starts launch/train.py on `config` (its flags); its output goes to
  `<workdir><tag>.log` (one file per process: two processes appending to
  one file garble it)."""
  env = {**os.environ, "JAX_NUM_CPU_DEVICES": str(devices),
         "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
         "JAX_PLATFORMS": "cpu",
         "JAX_COMPILATION_CACHE_DIR": testutil.CACHE_DIR,
         "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0.3",
         "PYTHONPATH": os.pathsep.join(
             [str(testutil.ROOT)] + os.environ.get("PYTHONPATH", "").split(
                 os.pathsep))}
  log = open(f"{workdir}{tag}.log", "w")  # pylint: disable=consider-using-with
  proc = subprocess.Popen(
      [sys.executable, str(testutil.ROOT / "launch" / "train.py"), *config,
       "--workdir", workdir, *extra], env=env, cwd=testutil.ROOT,
      stdout=log, stderr=subprocess.STDOUT)
  return proc, log


def _finish(procs) -> list[str]:
  """Waits for every process (killing all at the timeout); their logs."""
  out = []
  try:
    for proc, log in procs:
      proc.wait(timeout=_TIMEOUT_S)
  finally:
    for proc, log in procs:
      if proc.poll() is None:
        proc.kill()
        proc.wait()
      log.close()
      with open(log.name) as f:
        out.append(f.read())
  return out


def _run_info(workdir) -> dict:
  """The last line of `<workdir>/run_info.jsonl`."""
  with open(os.path.join(workdir, "run_info.jsonl")) as f:
    return json.loads(f.read().splitlines()[-1])


def _json(workdir, name) -> dict:
  with open(os.path.join(workdir, name)) as f:
    return json.load(f)


def _saved(path):
  """A saved TrainState as {path: numpy array}, on whatever devices we have."""
  checkpointer = ocp.PyTreeCheckpointer()
  tree = checkpointer.metadata(path)
  tree = getattr(getattr(tree, "item_metadata", tree), "tree", tree)
  state = checkpointer.restore(path, restore_args=jax.tree.map(
      lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree))
  return {jax.tree_util.keystr(k): np.asarray(v)
          for k, v in jax.tree_util.tree_leaves_with_path(state)}


@testutil.slow("two processes of a multi-host run, and one of 4 devices")
class TwoProcessTest(absltest.TestCase):

  def test_two_processes_equal_one_process_with_all_devices(self):
    with tempfile.TemporaryDirectory() as tmp:
      one, two = os.path.join(tmp, "one"), os.path.join(tmp, "two")
      address = f"127.0.0.1:{_free_port()}"
      procs = [_start(one, 4, "--config.steps_per_call=1")] + [
          _start(two, 2, "--coordinator_address", address,
                 "--num_processes", "2", "--process_id", str(i),
                 "--config.steps_per_call=2", tag=f".{i}")
          for i in range(2)]
      logs = _finish(procs)
      for (proc, _), log in zip(procs, logs):
        self.assertEqual(proc.returncode, 0, log[-6000:])
      self.assertIn("process 1 of 2", logs[2])
      self.assertEqual([_run_info(wd)["steps_per_call"] for wd in (one, two)],
                       [1, 2])

      # Checkpoints: one folder per saved step, the same steps.
      self.assertEqual(sorted(os.listdir(os.path.join(two, "ckpt"))),
                       ["2", "4"])
      self.assertEqual(sorted(os.listdir(os.path.join(one, "ckpt"))),
                       ["2", "4"])
      # Metrics: written once (by process 0), equal to one process's.
      got, want = (testutil.metric_records(wd, _UNEQUAL)
                   for wd in (two, one))
      self.assertEqual([r["step"] for r in got], [r["step"] for r in want])
      self.assertLen(got, 8)   # steps 0, 2, 4: measurements, train, eval
      for g, w in zip(got, want):
        self.assertEqual(set(g), set(w))
        for k in g:
          np.testing.assert_allclose(g[k], w[k], rtol=1e-5, atol=1e-6,
                                     err_msg=f"step {g['step']} {k}")
      self.assertEqual(*(_json(wd, "members.json") for wd in (two, one)))
      for name in ("config.json", "hparams.json"):   # but steps_per_call
        got, want = ({k: v for k, v in _json(wd, name).items()
                      if k != "steps_per_call"} for wd in (two, one))
        self.assertEqual(got, want, name)
        self.assertGreater(len(got), 10, name)
      # The saved state: parameters, Adam moments, step, hparams.
      got, want = (_saved(os.path.join(d, "ckpt", "4", "state"))
                   for d in (two, one))
      self.assertEqual(set(got), set(want))
      self.assertGreater(len(got), 20)
      self.assertEqual(int(got["['step']"]), 4)
      for name, value in got.items():
        if _NOISE not in name:
          np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-6,
                                     err_msg=name)


# One theory member (a few ms a step); a record every step, no checkpoint
# or evaluation before `num_steps`.
_THEORY = ("--config", "configs/theory_task.py:smoke",
           "--config.sweep.kappa1=()", "--config.sweep.kappa2=()",
           "--config.sweep.target=()",
           "--config.locater.kappa1=1.0", "--config.locater.kappa2=1.0",
           "--config.log_every=1", "--config.eval_every=100000",
           "--config.checkpoint_every=100000", "--config.progress_every_s=0")


def _records_once(test, workdir) -> list[int]:
  """The steps of `workdir`'s metrics.jsonl, each (step, key) once."""
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f]
  counts = collections.Counter((r["step"], k) for r in records for k in r
                                if k != "step")
  test.assertEqual(max(counts.values()), 1, "a metric record written twice")
  return sorted({r["step"] for r in records})


def _start_two(workdir, num_steps, tag, config):
  """Processes 0 and 1 of a 2-process run of `config` (2 devices each)."""
  address = f"127.0.0.1:{_free_port()}"
  return [_start(workdir, 2, f"--config.num_steps={num_steps}",
                 "--coordinator_address", address, "--num_processes", "2",
                 "--process_id", str(i), tag=f".{tag}{i}", config=config)
          for i in range(2)]


def _wait_for_step(test, workdir, step, procs) -> None:
  """Waits until process 0 has written the metrics of `step`."""
  jsonl = os.path.join(workdir, "metrics.jsonl")
  deadline = time.time() + _TIMEOUT_S
  while time.time() < deadline and all(p.poll() is None for p, _ in procs):
    if os.path.exists(jsonl) and f'"step": {step},' in open(jsonl).read():
      return
    time.sleep(0.1)
  test.fail(f"no step {step} in {jsonl}")


@testutil.slow("two processes stopped by SIGTERM to one, then resumed")
class PreemptionTest(absltest.TestCase):

  def test_sigterm_to_one_process_stops_both_at_one_checkpoint(self):
    with tempfile.TemporaryDirectory() as tmp:
      wd = os.path.join(tmp, "run")
      # stopped long before the end
      procs = _start_two(wd, 100_000, "first", _THEORY)
      _wait_for_step(self, wd, 3, procs)
      procs[1][0].send_signal(signal.SIGTERM)
      sent = time.time()
      logs = _finish(procs)
      took = time.time() - sent
      for (proc, _), log in zip(procs, logs):
        self.assertEqual(proc.returncode, 143, log[-6000:])
        self.assertNotIn("Traceback", log)
      self.assertLess(took, 60, "both processes exit within seconds")
      lines = [log.strip().splitlines()[-1] for log in logs]
      stopped = int(re.search(r"at step (\d+):", lines[0]).group(1))
      self.assertGreaterEqual(stopped, 3)
      for i, line in enumerate(lines):
        self.assertStartsWith(
            line, "qkspec: stopped by SIGTERM (to this or another process) "
            f"at step {stopped}: checkpoint {wd}/ckpt/{stopped} saved; to "
            "resume, rerun: ")
        self.assertIn("launch/train.py --config configs/theory_task.py:smoke",
                      line)
        self.assertEndsWith(line, f"--process_id {i}")
      self.assertEqual(os.listdir(os.path.join(wd, "ckpt")), [str(stopped)])
      self.assertEqual(_records_once(self, wd), list(range(stopped + 1)))

      procs = _start_two(wd, stopped + 2, "resumed", _THEORY)
      logs = _finish(procs)
      for (proc, _), log in zip(procs, logs):
        self.assertEqual(proc.returncode, 0, log[-6000:])
        self.assertIn(f"resumed from step {stopped}", log)
      self.assertEqual(sorted(os.listdir(os.path.join(wd, "ckpt"))),
                       sorted([str(stopped), str(stopped + 2)]))
      self.assertEqual(_records_once(self, wd), list(range(stopped + 3)))


# A checkpoint every 5 steps of the theory run above.
_LOSSY = _THEORY + ("--config.checkpoint_every=5",)


@testutil.slow("two processes, one killed, then both resumed")
class LostProcessTest(parameterized.TestCase):

  @parameterized.named_parameters(("process_1", 1), ("coordinator", 0))
  def test_the_survivor_names_the_lost_process_and_the_run_resumes(
      self, victim):
    from qkspec.runtime import peers  # pylint: disable=g-import-not-at-top
    with tempfile.TemporaryDirectory() as tmp:
      wd = os.path.join(tmp, "run")
      procs = _start_two(wd, 100_000, "first", _LOSSY)
      _wait_for_step(self, wd, 12, procs)
      procs[victim][0].kill()
      killed = time.time()
      survivor, _ = procs[1 - victim]
      survivor.wait(timeout=_TIMEOUT_S)
      took = time.time() - killed
      log = _finish(procs)[1 - victim]
      self.assertEqual(survivor.returncode, peers.LOST, log[-6000:])
      self.assertLess(took, peers.TIMEOUT_S + 15)
      self.assertNotIn("Traceback", log)
      self.assertNotIn("Check failure stack trace", log)   # no native dump
      saved = max(int(n) for n in os.listdir(os.path.join(wd, "ckpt"))
                  if n.isdigit())
      self.assertGreaterEqual(saved, 5)
      last = log.strip().splitlines()[-1]
      self.assertRegex(
          last, rf"^qkspec: process {victim} stopped answering after step "
          rf"\d+; the last checkpoint is step {saved}; rerun the same command "
          r"on every host to resume$")
      self.assertGreaterEqual(int(last.split("after step ")[1].split(";")[0]),
                              saved)

      procs = _start_two(wd, saved + 3, "resumed", _LOSSY)
      logs = _finish(procs)
      for (proc, _), log in zip(procs, logs):
        self.assertEqual(proc.returncode, 0, log[-6000:])
        self.assertIn(f"resumed from step {saved}", log)
      self.assertEqual(_records_once(self, wd), list(range(saved + 4)))


if __name__ == "__main__":
  absltest.main()
