"""The absl command line of `launch/`: --config and --workdir.

`launch/run.py` runs the experiment a config names (`config.experiment`)
or trains and plots a training config (`config.task`); `launch/train.py`
trains. A usage error (bad flag, config key or file, the `ConfigError` of
a config that `schema.validate`, an experiment or a resume refuses) prints
one line `qkspec: error: ...` and exits 2 (`--verbose_errors` adds the
traceback); any other error is a bug and keeps its traceback. Ctrl-C or
SIGTERM prints one line (for training, the checkpoint it saved and the
command that resumes) and exits 128 + the signal: 130 or 143, also on each
process of a multi-host run that another stopped. `--coordinator_address`,
`--num_processes`, `--process_id` start one process of a multi-host run.
`demo` is README's main job (`launch/demo.py`).
"""
import contextlib
import difflib
import importlib
import logging as py_logging
import os
import pathlib
import re
import shlex
import sys
import time
import traceback
from typing import Any, Callable, Iterator, NoReturn

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from qkspec import experiments
from qkspec.config import ConfigError
from qkspec.config import args

# The main job: every figure that needs no data set, on a CPU: theory_rho
# (Figs. 2-3, Lemma 2), entropy_bound (Fig. 4), simulate_rho (Fig. 5) and
# theory_task (the Sec. 2 model with and without LocATER).
DEMO = ("theory_rho", "entropy_bound", "simulate_rho", "theory_task")


@contextlib.contextmanager
def exit_on_interrupt(verbose: bool = False,
                      command: str | None = None) -> Iterator[None]:
  """KeyboardInterrupt -> one line, exit 128 + the signal (130, 143).

  The loop's `preemption.Interrupted` names its checkpoint and, given one,
  the `command` that resumes; any other prints "qkspec: interrupted".
  """
  try:
    yield
  except KeyboardInterrupt as e:
    if verbose:
      traceback.print_exception(e)
    # pylint: disable-next=g-import-not-at-top
    from qkspec.training import preemption
    if isinstance(e, preemption.Interrupted):
      line = f"{e.what}; to resume, rerun: {command}" if command else str(e)
      print(f"qkspec: {line}", file=sys.stderr, flush=True)
      sys.exit(128 + e.signum)
    print("qkspec: interrupted", file=sys.stderr, flush=True)
    sys.exit(130)           # 128 + SIGINT, what shells report for Ctrl-C


def run_experiment(config, workdir: str) -> Any:
  """Runs `config.experiment`'s `run(config, workdir)`, or trains `config`."""
  name = config.get("experiment", None)
  if name is None and "task" in config:       # a training config
    return train_and_plot(config, workdir)
  if name is None:
    raise ConfigError("the config names no experiment: set "
                      "config.experiment to one of "
                      f"{experiments.EXPERIMENTS} (or pass a training "
                      "config, which has config.task).")
  _check_experiment(name)
  return importlib.import_module(f"qkspec.experiments.{name}").run(config,
                                                                   workdir)


def check_config(config) -> None:
  """The check before processes start: the experiment a config names (its
  fields, and a training config's, are validated once, by the run)."""
  if config.get("experiment", None) is not None:
    _check_experiment(config.experiment)


def _check_experiment(name) -> None:
  """Raises ConfigError unless `name` is an experiment id."""
  if name not in experiments.EXPERIMENTS:
    raise ConfigError(f"config.experiment must be one of "
                      f"{experiments.EXPERIMENTS}, got {name!r}.")


def train_and_plot(config, workdir: str) -> Any:
  """Trains a training config (`config.task`); process 0 draws the figures."""
  # pylint: disable=g-import-not-at-top
  import jax
  from qkspec.plots import training_figures
  from qkspec.training import loop
  # pylint: enable=g-import-not-at-top
  state = loop.train_and_evaluate(config, workdir)
  if jax.process_index() == 0:
    training_figures.plot_workdir(workdir)
  return state

def demo(workdir: str, configs_dir: str, smoke: bool = False,
         only: tuple[str, ...] = DEMO) -> dict[str, list[str]]:
  """Runs the `DEMO` experiments `only`, each with `configs_dir/<id>.py`
  into `workdir/<id>/`, logging each one's time; {experiment: [its PNG
  paths]}."""
  unknown = set(only) - set(DEMO)
  if unknown:
    raise ValueError(f"unknown experiments {sorted(unknown)}; choose from "
                     f"{DEMO}.")
  root = pathlib.Path(workdir)
  figures = {}
  for i, name in enumerate(only, 1):
    start = time.time()
    logging.info("[%d/%d] %s ...", i, len(only), name)
    config = args.load_config_file(
        pathlib.Path(configs_dir) / f"{name}.py", "smoke" if smoke else None)
    run_experiment(config, str(root / name))
    figures[name] = sorted(str(p) for p in (root / name).glob("*.png"))
    logging.info("[%d/%d] %s done in %.0f s", i, len(only), name,
                 time.time() - start)
  lines = [f"{name}:\n" + "\n".join(f"  {f}" for f in figs)
           for name, figs in figures.items()]
  print(f"qkspec demo finished; figures and tables (CSV/JSON) are in "
        f"{root.resolve()}:\n" + "\n".join(lines), flush=True)
  return figures


class _NoTpuFilter(py_logging.Filter):
  """Drops jax's note that there is no libtpu (logged on every CPU/GPU run;
  a libtpu that is there but fails keeps its message)."""

  def filter(self, record: py_logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (message.startswith("Unable to initialize backend 'tpu'")
                and "cannot open shared object file" in message)


def quiet_tpu_probe() -> None:
  """Installs `_NoTpuFilter` on jax's backend logger (idempotent)."""
  logger = py_logging.getLogger("jax._src.xla_bridge")
  if not any(isinstance(f, _NoTpuFilter) for f in logger.filters):
    logger.addFilter(_NoTpuFilter())


def _fail(message: str, error: BaseException | None,
          verbose: bool) -> NoReturn:
  """Prints `qkspec: error: message` (after the traceback if `verbose`)."""
  if verbose and error is not None:
    traceback.print_exception(error)
  print(f"qkspec: error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def _chain(error: BaseException) -> list[BaseException]:
  """`error` and its causes/contexts as a traceback shows them, outermost
  first."""
  out = []
  while error is not None and error not in out:
    out.append(error)
    error = error.__cause__ or (None if error.__suppress_context__
                                else error.__context__)
  return out


def _overrides(argv: list[str]) -> list[str]:
  """The dotted fields of the --config.x.y overrides on the command line."""
  matches = (re.match(r"^--?(?:no)?config\.([^=]+)", a) for a in argv[1:])
  return [m.group(1) for m in matches if m]


def _unknown_field(config, field: str) -> str | None:
  """None if the dotted `field` is one of `config`, else one line naming
  it and the closest existing field."""
  parts, node = field.split("."), config
  for i, part in enumerate(parts):
    keys = [str(k) for k in node.keys()] if hasattr(node, "keys") else []
    if part in keys:
      node = node[part]
      continue
    line = f"--config.{field}: the config has no field {field!r}"
    near = difflib.get_close_matches(part, keys, 1, 0.75)
    if near:
      line += f"; did you mean --config.{'.'.join(parts[:i] + near)}" + (
          "".join(f".{p}" for p in parts[i + 1:]) + "?")
    return line
  return None


def _unknown_field_message(argv: list[str]) -> str | None:
  """One line for the first --config.x.y override that names no field of
  the config (ml_collections raises a KeyError or AttributeError that says
  so only in its text), or None if every override names a field."""
  value = _config_arg(argv)
  if value is None:
    return None
  path, _, arg = value.partition(":")
  try:
    config = args.load_config_file(path, arg or None)
  except Exception:  # pylint: disable=broad-except
    return None      # the flag error stands as it is
  lines = (_unknown_field(config, field) for field in _overrides(argv))
  return next((line for line in lines if line), None)


def _flag_error_message(error: flags.Error, argv: list[str]) -> str:
  """One line for an absl flag error (bad value, unknown flag, ...), or for
  the `ConfigError` of a config's `:arg` (config_flags wraps it)."""
  root = _chain(error)[-1]
  if isinstance(root, ConfigError):
    return f"--config={_config_arg(argv)}: {root}"
  return _one_line(str(error))


def _config_arg(argv: list[str]) -> str | None:
  """The value of --config on the command line (the last one given)."""
  value = None
  for i, arg in enumerate(argv[1:], 1):
    if arg in ("--config", "-config") and i + 1 < len(argv):
      value = argv[i + 1]
    elif arg.startswith(("--config=", "-config=")):
      value = arg.split("=", 1)[1]
  return value


def _load_error_message(error: OSError, argv: list[str]) -> str:
  """One line for a config file that could not be read."""
  value = _config_arg(argv)
  path = (value or "").split(":", 1)[0]
  if not os.path.exists(path):
    return (f"--config={value}: no such file {path!r} (looked for "
            f"{os.path.abspath(path)})")
  return (f"--config={value}: cannot load {path!r}: "
          f"{_one_line(str(_chain(error)[-1]))}")


def _one_line(text: str) -> str:
  """`text`'s non-blank lines, stripped, joined by "; "."""
  return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _wants_traceback(argv: list[str]) -> bool:
  """--verbose_errors on the command line (read before the flags parse)."""
  verbose = False
  for arg in argv[1:]:
    m = re.match(r"^--?(no)?verbose_errors(?:=(.*))?$", arg)
    if m:
      verbose = not m.group(1) and (m.group(2) or "true").lower() in (
          "true", "1", "t", "yes")
  return verbose


def _parse_flags(argv: list[str], config) -> list[str]:
  """absl's flag parsing, with usage errors as one line and exit status 2."""
  verbose = _wants_traceback(argv)
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:
    _fail(_flag_error_message(e, argv), e, verbose)
  except (KeyError, AttributeError) as e:
    message = _unknown_field_message(argv)
    if message is None:
      raise                       # not a config field: a bug, keep its trace
    _fail(message, e, verbose)
  try:
    config.value.get  # pylint: disable=pointless-statement
  except OSError as e:            # config_flags defers a failed load to here
    _fail(_load_error_message(e, argv), e, verbose)
  return rest


def start_processes(coordinator_address: str | None,
                    num_processes: int | None,
                    process_id: int | None, multihost: bool = False) -> bool:
  """`jax.distributed.initialize` with the multi-host flags, if given, or
  with what jax finds itself (TPU pod slice, SLURM, Open MPI) if
  `multihost`; whether this is one process of several.

  Raises:
    ConfigError: incomplete flags, or `multihost` and no cluster found.
  """
  import jax  # pylint: disable=g-import-not-at-top
  given = {"--coordinator_address": coordinator_address,
           "--num_processes": num_processes, "--process_id": process_id}
  missing = [k for k, v in given.items() if v is None]
  if len(missing) == len(given):
    if not multihost:
      return False
    try:
      jax.distributed.initialize()      # from the cluster's environment
    except (ValueError, RuntimeError) as e:
      reason = str(e).splitlines()[0] if str(e) else type(e).__name__
      raise ConfigError(
          f"--config.multihost=True: jax found no cluster to join ({reason}); "
          "on a TPU pod slice, SLURM or Open MPI it finds the processes "
          "itself, elsewhere pass --coordinator_address, --num_processes "
          "and --process_id.") from e
    return jax.process_count() > 1
  if missing:
    raise ConfigError(f"a multi-host run needs --coordinator_address, "
                      f"--num_processes and --process_id; "
                      f"{', '.join(missing)} missing.")
  if not 0 <= process_id < num_processes:
    raise ConfigError(f"--process_id={process_id} must be in [0, "
                      f"--num_processes={num_processes}).")
  logging.info("process %d of %d: coordinator %s", process_id, num_processes,
               coordinator_address)
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes,
                             process_id=process_id)
  return True


def main(run: Callable[..., Any], what: str = "config") -> None:
  """Defines the flags, then calls `run(config, workdir)`; `what` names the
  kind of config in --help."""
  config = config_flags.DEFINE_config_file(
      "config", None, f"Path to a {what} file (append :smoke for a tiny "
      "run).", lock_config=True)
  workdir = flags.DEFINE_string(
      "workdir", None, "Directory for figures, tables, metrics, checkpoints "
      "and config.json.")
  verbose = flags.DEFINE_bool(
      "verbose_errors", False, "Print the traceback of a usage error (else "
      "one line, exit status 2) and of Ctrl-C or SIGTERM.")
  coordinator = flags.DEFINE_string(
      "coordinator_address", None, "Multi-host: HOST:PORT of process 0 (the "
      "same on every host). With --num_processes and --process_id; absent: "
      "one process (or --config.multihost=True on a TPU pod, which finds "
      "them itself).")
  num_processes = flags.DEFINE_integer(
      "num_processes", None, "Multi-host: how many processes.", lower_bound=1)
  process_id = flags.DEFINE_integer(
      "process_id", None, "Multi-host: this process, 0 .. num_processes - 1 "
      "(0 writes the metrics, figures and config.json).", lower_bound=0)
  flags.mark_flags_as_required(["config", "workdir"])
  for flag in (config, workdir, verbose, coordinator, num_processes,
               process_id):   # listed by --help, not only --helpfull
    flags.FLAGS.register_key_flag_for_module(sys.argv[0],
                                             flags.FLAGS[flag.name])
  quiet_tpu_probe()

  def _main(argv):
    if len(argv) > 1:
      _fail(f"unexpected arguments {argv[1:]} (flags are --name=value)", None,
            False)
    try:
      check_config(config.value)
      start_processes(coordinator.value, num_processes.value,
                      process_id.value, bool(config.value.get("multihost")))
      with exit_on_interrupt(verbose.value, shlex.join(sys.orig_argv)):
        run(config.value, workdir.value)
    except ConfigError as e:
      _fail(str(e), e, verbose.value)

  app.run(_main, flags_parser=lambda argv: _parse_flags(argv, config))
