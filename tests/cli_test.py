"""The entry points: launch/run.py (experiments) and launch/train.py.

Also how every command ends on a usage error (one line, exit status 2) and
on Ctrl-C or SIGTERM (one line, exit status 130 or 143), and jax's TPU
probe note dropped.
"""
import ast
import contextlib
import importlib
import io
import json
import logging
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import textwrap

from absl.testing import absltest
import ml_collections

from qkspec import cli
from qkspec.config import ConfigError
from qkspec.experiments import EXPERIMENTS
import testutil

TRAINING = ("theory_task", "locater_wt2", "rho_training", "depth_width")


class RunnerTest(absltest.TestCase):

  def test_experiments_are_the_configs_experiments_and_each_has_run(self):
    named = {testutil.get_config(p.stem, "smoke").get("experiment")
             for p in (testutil.ROOT / "configs").glob("*.py")
             if p.stem != "__init__"} - {None}
    self.assertCountEqual(EXPERIMENTS, named)
    for name in EXPERIMENTS:
      module = importlib.import_module(f"qkspec.experiments.{name}")
      self.assertTrue(callable(module.run), name)

  def test_every_config_names_its_own_experiment_or_is_a_training_config(self):
    stems = sorted(p.stem for p in (testutil.ROOT / "configs").glob("*.py")
                   if p.stem != "__init__")
    self.assertCountEqual(stems, EXPERIMENTS + TRAINING)
    for name in EXPERIMENTS:
      self.assertEqual(testutil.get_config(name, "smoke").experiment, name)
    for name in TRAINING:
      config = testutil.get_config(name, "smoke")
      self.assertNotIn("experiment", config)
      self.assertIn(config.task, ("theory", "lm"))

  def test_every_config_docstring_says_how_to_launch_it(self):
    for name in EXPERIMENTS + TRAINING:
      path = testutil.ROOT / "configs" / f"{name}.py"
      doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
      script = "run" if name in EXPERIMENTS else "train"
      self.assertIn(f"python launch/{script}.py --config configs/{name}.py",
                    doc, name)
      self.assertLessEqual(len(doc.splitlines()), 30, name)

  def test_bad_experiment_names_raise(self):
    for bad in ("simulate", "demo", "_private", "outputs", "inputs", 3):
      config = ml_collections.ConfigDict({"experiment": bad})
      with self.assertRaisesRegex(ValueError, "config.experiment must be one "
                                  "of .*simulate_rho"):
        cli.run_experiment(config, "/nonexistent/never/written")
    with self.assertRaisesRegex(ValueError, "names no experiment"):
      cli.run_experiment(ml_collections.ConfigDict({"seed": 0}),
                         "/nonexistent/never/written")

  def test_run_dispatches_to_the_named_experiment(self):
    config = testutil.get_config("entropy_bound", "smoke")
    with tempfile.TemporaryDirectory() as tmp:
      out = cli.run_experiment(config, tmp)
      self.assertIsNotNone(out)
      self.assertTrue((pathlib.Path(tmp) / "config.json").exists())
      self.assertTrue(list(pathlib.Path(tmp).glob("*.png")))


class LaunchTest(absltest.TestCase):

  def _launch(self, script, config, workdir):
    return subprocess.run(
        [sys.executable, str(testutil.ROOT / "launch" / script), "--config",
         str(testutil.ROOT / "configs" / config), "--workdir", workdir],
        capture_output=True, text=True, cwd=testutil.ROOT, timeout=600)

  def test_run_writes_the_tables_of_the_library_call(self):
    with tempfile.TemporaryDirectory() as tmp:
      launched = self._launch("run.py", "entropy_bound.py:smoke",
                              f"{tmp}/launched")
      self.assertEqual(launched.returncode, 0, launched.stderr[-2000:])
      cli.run_experiment(testutil.get_config("entropy_bound", "smoke"),
                         f"{tmp}/called")
      for name in ("entropy_bound.csv", "entropy_bound_summary.csv"):
        self.assertEqual(
            (pathlib.Path(tmp) / "launched" / name).read_text(),
            (pathlib.Path(tmp) / "called" / name).read_text())

  def test_launch_script_with_override(self):
    workdir = testutil.workdir(self)
    cmd = [sys.executable, "launch/run.py",
           "--config", "configs/entropy_bound.py:smoke",
           "--config.nu_max=12.0", "--workdir", str(workdir)]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(cmd, cwd=testutil.ROOT, capture_output=True,
                          text=True,
                          env=env, timeout=120, check=False)
    self.assertEqual(proc.returncode, 0, proc.stderr[-2000:])
    self.assertIn("fig4_entropy_bound.png", proc.stdout)
    saved = json.loads((workdir / "config.json").read_text())
    self.assertEqual(saved["nu_max"], 12.0)

  def test_launch_holds_only_the_commands_a_user_runs(self):
    scripts = sorted(p.stem for p in (testutil.ROOT / "launch").glob("*.py")
                     if p.stem != "__init__")
    self.assertEqual(scripts, ["demo", "plot_training", "report", "run",
                               "train"])


def _launch_args(script, *args):
  return [sys.executable, str(testutil.ROOT / "launch" / script), *args]


class UsageErrorTest(absltest.TestCase):
  """A usage error ends in one line naming the key or path, status 2."""

  def _fails(self, script, *args):
    """Runs `script args` (expecting status 2); returns stderr's lines."""
    r = subprocess.run(_launch_args(script, *args, "--workdir",
                                    "/nonexistent/never/written"),
                       capture_output=True, text=True, cwd=testutil.ROOT,
                       timeout=120, check=False)
    self.assertEqual(r.returncode, 2, r.stderr[-3000:])
    self.assertNotIn("Traceback", r.stderr)
    lines = r.stderr.strip().splitlines()
    self.assertLen(lines, 1, r.stderr[-3000:])
    self.assertStartsWith(lines[0], "qkspec: error: ")
    return lines[0]

  def test_a_misspelled_key_names_it_and_the_right_one(self):
    # launch/train.py, the training command; run.py shares cli.main.
    line = self._fails("train.py", "--config", "configs/theory_task.py:smoke",
                       "--config.locater.kapa1=1")
    self.assertIn("--config.locater.kapa1", line)
    self.assertIn("did you mean --config.locater.kappa1?", line)
    self.assertNotIn("\\n", line)
    line = self._fails("run.py", "--config", "configs/theory_task.py:smoke",
                       "--config.locatr.kappa1=1")
    self.assertIn("did you mean --config.locater.kappa1?", line)

  def test_a_missing_config_file_names_the_path(self):
    line = self._fails("run.py", "--config", "configs/config_config")
    self.assertIn("no such file 'configs/config_config'", line)
    self.assertIn(str(testutil.ROOT / "configs" / "config_config"), line)
    line = self._fails("run.py", "--config=configs/theory_task.py:smok")
    self.assertIn("unknown config argument 'smok'", line)
    line = self._fails("train.py", "--config=configs/depth_width.py:L=2")
    self.assertEqual(line, "qkspec: error: --config=configs/depth_width.py:"
                     "L=2: depth_width: L must be 1, 3 or 6 and d 32 or 128, "
                     "got L=2, d=128.")
    line = self._fails("train.py", "--config=configs/depth_width.py:L=x")
    self.assertEqual(line, "qkspec: error: --config=configs/depth_width.py:"
                     "L=x: config argument 'L' takes values like 1, got 'x'.")

  def test_bad_values_print_the_check_that_failed(self):
    theory = "configs/theory_task.py:smoke"
    for config, flag, want in (
        (theory, "--config.model.num_heads=3",
         "config.model.num_heads=3 does not divide"),       # schema.validate
        (theory, "--config.num_steps=abc", "--config.num_steps=abc"),
        ("configs/entropy_bound.py:smoke", "--config.experiment=nope",
         "config.experiment must be one of"),
        (theory, "--num_processes=2", "--coordinator_address"),
        (theory, "--config.multihost=True", "jax found no cluster to join")):
      self.assertIn(want, self._fails("run.py", "--config", config, flag))

  def test_verbose_errors_keeps_the_traceback(self):
    r = subprocess.run(_launch_args(
        "run.py", "--config", "configs/theory_task.py:smoke",
        "--config.locater.kapa1=1", "--workdir", "/nonexistent/never",
        "--verbose_errors"), capture_output=True, text=True,
                       cwd=testutil.ROOT, timeout=120, check=False)
    self.assertEqual(r.returncode, 2)
    self.assertIn("Traceback", r.stderr)
    self.assertEndsWith(r.stderr.strip(), "did you mean "
                        "--config.locater.kappa1?")

  def test_help_lists_every_flag(self):
    r = subprocess.run(_launch_args("run.py", "--help"), capture_output=True,
                       text=True, cwd=testutil.ROOT, timeout=120, check=False)
    for flag in ("--config", "--workdir", "--[no]verbose_errors",
                 "--coordinator_address", "--num_processes", "--process_id"):
      self.assertIn(f"  {flag}: ", r.stdout + r.stderr)

  def test_only_a_config_error_is_a_usage_error(self):
    # A ValueError of numpy's is a bug and keeps its traceback; the
    # ConfigError of a run is one line.
    script = textwrap.dedent("""
        import os
        import numpy as np
        from qkspec.config import ConfigError
        from qkspec import cli
        def run(config, workdir):
          if os.environ["RAISE"] == "bug":
            np.reshape(np.arange(3), (2, 2))
          raise ConfigError("config.x is wrong.")
        cli.main(run)
        """)
    for kind in ("bug", "usage"):
      r = subprocess.run(
          [sys.executable, "-c", script, "--config",
           "configs/entropy_bound.py:smoke", "--workdir", "/nonexistent"],
          capture_output=True, text=True, cwd=testutil.ROOT, timeout=120,
          check=False, env=dict(os.environ, RAISE=kind))
      if kind == "bug":
        self.assertEqual(r.returncode, 1, r.stderr[-3000:])
        self.assertIn("Traceback", r.stderr)
        self.assertIn("cannot reshape", r.stderr)
      else:
        self.assertEqual(r.returncode, 2, r.stderr[-3000:])
        self.assertEqual(r.stderr.strip(), "qkspec: error: config.x is wrong.")
    with self.assertRaisesRegex(ConfigError, "--coordinator_address"):
      cli.start_processes(None, 2, None)


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
        cli.main(run)
        """)
    with subprocess.Popen(
        [sys.executable, "-c", script, "--config",
         "configs/entropy_bound.py:smoke", "--workdir", "/nonexistent/never"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=testutil.ROOT) as p:
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


class TpuNoteTest(absltest.TestCase):

  def test_only_the_missing_libtpu_note_is_dropped(self):
    cli.quiet_tpu_probe()
    cli.quiet_tpu_probe()
    logger = logging.getLogger("jax._src.xla_bridge")
    self.assertLen([f for f in logger.filters
                    if isinstance(f, cli._NoTpuFilter)], 1)  # pylint: disable=protected-access

    def kept(message):
      return logger.filter(logger.makeRecord(
          logger.name, logging.INFO, __file__, 1, message, (), None))

    self.assertFalse(kept("Unable to initialize backend 'tpu': INTERNAL: "
                          "Failed to open libtpu.so: libtpu.so: cannot open "
                          "shared object file: No such file or directory"))
    self.assertTrue(kept("Unable to initialize backend 'tpu': "
                         "ABORTED: the TPU is in use by another process"))
    self.assertTrue(kept("Unable to initialize backend 'tpu': INTERNAL: "
                         "Failed to open libtpu.so: undefined symbol: x"))
    self.assertTrue(kept("Unable to initialize backend 'cuda': no GPU"))


if __name__ == "__main__":
  absltest.main()
