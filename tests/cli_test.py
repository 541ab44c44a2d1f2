"""The command line: launch/ as a user runs it.

Every mistake a user can make at a launch command ends in one line
`qkspec: error: ...` with exit status 2, `--help` lists the flags and the
configs with their arguments (exit 0), `--print_config` prints the
resolved config, Ctrl-C prints one line and exits 130. The commands run
in one child process, which forks one process per command after the
imports they share (a fork costs milliseconds; Python and absl, a second).
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest

from qkspec.experiments import runner
import testutil

# Runs each argv of the JSON list on stdin as `python argv...` would, in a
# fork; prints [[exit status, stdout and stderr], ...].
_FORKS = r"""
import json, os, runpy, sys, traceback
from absl import app, flags                       # what every command loads
from ml_collections import config_flags
import qkspec.cli, qkspec.config.schema, qkspec.experiments.runner
import qkspec.runtime.processes, qkspec.training.loop, threading
assert threading.active_count() == 1, threading.enumerate()
out = []
for argv in json.loads(sys.stdin.read()):
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:
    os.dup2(w, 1), os.dup2(w, 2)
    sys.argv, code = argv, 1
    try:
      runpy.run_path(argv[0], run_name="__main__")
      code = 0
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else int(e.code is not None)
    except BaseException:
      traceback.print_exc()
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)
  os.close(w)
  with os.fdopen(r) as f:
    text = f.read()
  out.append([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), text])
print(json.dumps(out))
"""


def _launch_all(commands: list[list[str]]) -> list[tuple[int, str]]:
  """(exit status, output) of each command (a script and its flags)."""
  proc = subprocess.run([sys.executable, "-c", _FORKS],
                        input=json.dumps(commands), capture_output=True,
                        text=True, cwd=testutil.ROOT, timeout=600,
                        check=True)
  return [tuple(r) for r in json.loads(proc.stdout.splitlines()[-1])]


def _train(*flags):
  return ["launch/train.py", *flags]


def _run(*flags):
  return ["launch/run.py", *flags]


_THEORY = "--config=configs/theory_task.py:smoke"


class UsageErrorTest(absltest.TestCase):
  """Each mistake: one line naming it, exit status 2, no traceback."""

  def test_every_mistake_is_one_line_and_status_2(self):
    tmp = testutil.workdir(self).parent
    (tmp / "experiment").mkdir()                 # a launch/run.py workdir
    (tmp / "experiment" / "config.json").write_text(
        json.dumps({"experiment": "entropy_bound"}))
    (tmp / "resumed" / "ckpt" / "2").mkdir(parents=True)
    config = testutil.get_config("theory_task", "smoke")
    config.model.d_model = 16                    # checkpoints of another
    (tmp / "resumed" / "config.json").write_text(config.to_json())
    no_dir = "--workdir=/nonexistent/never/written"
    wt2 = "--config=configs/locater_wt2.py"
    cases = [
        (_train(_THEORY, "--config.locater.kapa1=1", no_dir),
         "--config.locater.kapa1: the config has no field 'locater.kapa1'; "
         "did you mean --config.locater.kappa1?"),
        (_run("--config", "configs/config_config", no_dir),
         "--config=configs/config_config: no such file "
         f"'configs/config_config' (looked for "
         f"{testutil.ROOT / 'configs' / 'config_config'})"),
        (_run("--config=configs/theory_task.py:smok", no_dir),
         "unknown config argument 'smok'"),
        (_train("--config=configs/depth_width.py:L=2", no_dir),
         "--config=configs/depth_width.py:L=2: depth_width: L must be 1, 3 "
         "or 6 and d 32 or 128, got L=2, d=128."),
        (_train("--config=configs/depth_width.py:L=x", no_dir),
         "--config=configs/depth_width.py:L=x: config argument 'L' takes "
         "values like 1, got 'x'."),
        (_run(_THEORY, "--config.model.num_heads=3", no_dir),
         "config.model.num_heads=3 does not divide"),
        (_run(_THEORY, "--config.num_steps=abc", no_dir),
         "--config.num_steps=abc"),
        (_run("--config=configs/entropy_bound.py:smoke",
              "--config.experiment=nope", no_dir),
         "config.experiment must be one of"),
        (_run(_THEORY, "--num_processes=2", no_dir), "--coordinator_address"),
        (_run(_THEORY, "--config.multihost=True", no_dir),
         "jax found no cluster to join"),
        (_train("--config", "configs/simulate_rho.py", no_dir),
         "an experiment config (config.experiment='simulate_rho'): run it "
         "with python launch/run.py"),
        (_train(wt2, "--config.data.manual_dir=WIKITEXT_DIR", no_dir),
         "config.data.manual_dir='WIKITEXT_DIR': no such directory; "
         "--config.data.manual_dir takes a directory holding WikiText-2's"),
        (_train(f"{wt2}:smoke", "--config.data.manual_dir=/data", no_dir),
         "add --config.data.name=wikitext2 for a small run on that data"),
        (_train(_THEORY, f"--workdir={tmp / 'resumed'}"),
         f"{tmp / 'resumed'} holds checkpoints of another config "
         "(model.d_model 16 -> 8); use a fresh --workdir"),
        (_train(no_dir), "--config is required: python launch/train.py "
         "--config configs/<name>.py --workdir DIR"),
        (_train(_THEORY), "--workdir is required"),
        (_train(_THEORY, no_dir, "extra"), "unexpected arguments ['extra']"),
        (["launch/plot_training.py", f"--workdir={tmp}"],
         f"{tmp}: no training run (it has no members.json); give a "
         "launch/train.py --workdir."),
        (["launch/report.py", f"--runs={tmp / 'experiment'}"],
         f"{tmp / 'experiment'}: the workdir of the experiment "
         "'entropy_bound' (launch/run.py), not a training run"),
        (["launch/demo.py", "--only=simulate_grid", no_dir],
         "run simulate_grid with python launch/run.py --config "
         "configs/simulate_grid.py --workdir DIR."),
        (["launch/report.py", "--norecords"], "--norecords reports on --runs "
         "alone"),
    ]
    results = _launch_all([argv for argv, _ in cases])
    for (argv, want), (code, out) in zip(cases, results):
      self.assertEqual(code, 2, f"{argv}: {out[-3000:]}")
      self.assertNotIn("Traceback", out, argv)
      lines = out.strip().splitlines()
      self.assertLen(lines, 1, f"{argv}: {out[-3000:]}")
      self.assertStartsWith(lines[0], "qkspec: error: ")
      self.assertIn(want, lines[0], argv)

  def test_help_print_config_verbose_errors_and_bugs(self):
    bug = testutil.workdir(self).parent / "bug.py"
    bug.write_text(textwrap.dedent("""
        import numpy as np
        from qkspec import cli
        from qkspec.config import ConfigError
        def run(config, workdir):
          if workdir == "bug":
            np.reshape(np.arange(3), (2, 2))
          raise ConfigError("config.x is wrong.")
        cli.main(run, lambda config: None, "configs", training_only=False)
        """))
    (train_help, run_help, printed, verbose, buggy, usage) = _launch_all([
        _train("--help"), _run("-help"),
        _train(_THEORY, "--config.num_steps=7", "--print_config"),
        _run(_THEORY, "--config.locater.kapa1=1", "--workdir=w",
             "--verbose_errors"),
        [str(bug), "--config=configs/entropy_bound.py", "--workdir=bug"],
        [str(bug), "--config=configs/entropy_bound.py", "--workdir=w"]])
    for code, out in (train_help, run_help):
      self.assertEqual(code, 0, out)
      for flag in ("--config", "--workdir", "--[no]print_config",
                   "--[no]verbose_errors", "--coordinator_address",
                   "--num_processes", "--process_id", "--peer_timeout_s"):
        self.assertIn(f"  {flag}: ", out)
      self.assertNotIn("(default: 'None')", out)
      self.assertIn("  locater_wt2.py  LocATER on WikiText-2", out)
      self.assertIn("      :smoke fairseq seeds=1 contrast seed=0 none "
                    "both_readings\n       kappa2=0,0.001,0.01,0.1,1\n", out)
    self.assertNotIn("simulate_rho.py", train_help[1])
    self.assertIn("  simulate_rho.py  Monte Carlo rho_i", run_help[1])
    self.assertEqual(printed[0], 0, printed[1])
    self.assertIn("num_steps: 7\n", printed[1])
    self.assertIn("task: theory\n", printed[1])
    self.assertEqual(verbose[0], 2)
    self.assertIn("Traceback", verbose[1])
    self.assertEndsWith(verbose[1].strip(), "did you mean "
                        "--config.locater.kappa1?")
    self.assertEqual(buggy[0], 1, buggy[1])    # a bug keeps its traceback
    self.assertIn("cannot reshape", buggy[1])
    self.assertEqual(usage, (2, "qkspec: error: config.x is wrong.\n"))


class LaunchTest(absltest.TestCase):

  def test_run_writes_the_tables_of_the_library_call(self):
    with tempfile.TemporaryDirectory() as tmp:
      launched = subprocess.run(
          [sys.executable, "launch/run.py", "--config",
           "configs/entropy_bound.py:smoke", "--config.nu_max=12.0",
           "--workdir", f"{tmp}/launched"], capture_output=True, text=True,
          cwd=testutil.ROOT, timeout=600, check=False)
      self.assertEqual(launched.returncode, 0, launched.stderr[-2000:])
      self.assertIn("fig4_entropy_bound.png", launched.stdout)
      config = testutil.get_config("entropy_bound", "smoke")
      config.nu_max = 12.0
      runner.run(config, f"{tmp}/called")
      for name in ("entropy_bound.csv", "entropy_bound_summary.csv",
                   "config.json"):
        self.assertEqual(
            (pathlib.Path(tmp) / "launched" / name).read_text(),
            (pathlib.Path(tmp) / "called" / name).read_text())

  def test_launch_holds_only_the_commands_a_user_runs(self):
    scripts = sorted(p.stem for p in (testutil.ROOT / "launch").glob("*.py")
                     if p.stem != "__init__")
    self.assertEqual(scripts, ["demo", "plot_training", "report", "run",
                               "train"])

  def test_cli_is_one_job_of_about_150_lines(self):
    lines = (testutil.ROOT / "qkspec" / "cli.py").read_text().splitlines()
    self.assertLessEqual(len(lines), 165)
    for word in ("jax.distributed", "sys.argv[1:]", "re.match"):
      self.assertNotIn(word, "\n".join(lines))


class InterruptTest(absltest.TestCase):

  def test_ctrl_c_prints_one_line_and_exits_130(self):
    # Short sleeps, as a run's steps are: a SIGINT that the kernel hands
    # to another of the process's threads (JAX starts several) reaches
    # Python's handler only when the main thread next runs Python, which
    # one long sleep would put off past the timeout (seen once, under
    # the full suite's load). SIGINT handled as in a terminal's foreground:
    # a suite started in the background (`cmd &` without job control, as
    # a CI harness may) hands its processes SIGINT ignored, which Python
    # then keeps (the test failed so).
    script = textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from qkspec import cli
        def run(config, workdir):
          print("running", flush=True)
          for _ in range(1200):
            time.sleep(0.1)
        cli.main(run, lambda config: None, "configs", training_only=False)
        """)
    with subprocess.Popen(
        [sys.executable, "-c", script, "--config",
         "configs/entropy_bound.py:smoke", "--workdir", "/nonexistent/never"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=testutil.ROOT, env=dict(os.environ, JAX_PLATFORMS="cpu")) as p:
      try:
        self.assertEqual(p.stdout.readline().strip(), "running")
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
      finally:
        p.kill()
    self.assertEqual(p.returncode, 130, err[-3000:])
    self.assertNotIn("Traceback", err)
    self.assertEqual(err.strip().splitlines()[-1], "qkspec: interrupted")

  def test_a_stopped_run_prints_its_checkpoint_and_exits_128_plus_signal(self):
    import contextlib  # pylint: disable=g-import-not-at-top
    import io  # pylint: disable=g-import-not-at-top
    from qkspec import cli  # pylint: disable=g-import-not-at-top
    from qkspec.training import preemption  # pylint: disable=g-import-not-at-top
    what = "stopped by SIGTERM at step 7: checkpoint /w/ckpt/7 saved"
    for signum, code, command, line in (
        (signal.SIGTERM, 143, "python launch/train.py --workdir w",
         f"qkspec: {what}; to resume, rerun: python launch/train.py "
         "--workdir w"),
        (signal.SIGINT, 130, None,
         f"qkspec: {what}; to resume, rerun the same command with --workdir "
         "/w.")):
      err = io.StringIO()
      with self.assertRaises(SystemExit) as cm, \
           contextlib.redirect_stderr(err):
        with cli.exit_on_interrupt(command=command):
          raise preemption.Interrupted(what, "/w", signum)
      self.assertEqual(cm.exception.code, code)
      self.assertEqual(err.getvalue(), line + "\n")


if __name__ == "__main__":
  absltest.main()
