"""The absl command line of `launch/`: flags in, one library call out.

`main(run, check, ...)` serves `launch/run.py` and `launch/train.py`:
`--config FILE[:ARG]` (and `--config.x=y`), `--workdir`, `--print_config`,
the multi-host flags, then `run(config, workdir)`; `command(main)` the
other launch scripts. A usage error (any `ConfigError`; its wording lives
in `qkspec.config.usage`) prints one line `qkspec: error: ...` and exits 2,
`--verbose_errors` adds the traceback and the config; any other error is a
bug and keeps its traceback. `--help` exits 0. Ctrl-C or SIGTERM prints
one line and exits 128 + the signal (130, 143); a process of a multi-host
run that loses another exits with `peers.LOST` (75).
"""
import contextlib
import pathlib
import shlex
import sys
import traceback
from typing import Any, Callable, Iterator, NoReturn

from absl import app
from absl import flags
from ml_collections import config_flags

from qkspec.config import ConfigError
from qkspec.config import argv as argv_lib
from qkspec.config import usage
from qkspec.runtime import logs
from qkspec.runtime import peers

_HELP = ("help", "helpshort", "helpfull", "h", "?")


def fail(message: str, error: BaseException | None = None,
         verbose: bool = False, config: Any = None) -> NoReturn:
  """Prints `qkspec: error: message` (after the traceback and `config` if
  `verbose`) and exits 2."""
  if verbose and error is not None:
    traceback.print_exception(error)
    if config is not None:
      print(f"the config:\n{config}", file=sys.stderr)
  print(f"qkspec: error: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


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
    from qkspec.training import preemption  # pylint: disable=g-import-not-at-top
    if isinstance(e, preemption.Interrupted):
      line = f"{e.what}; to resume, rerun: {command}" if command else str(e)
      print(f"qkspec: {line}", file=sys.stderr, flush=True)
      sys.exit(128 + e.signum)
    print("qkspec: interrupted", file=sys.stderr, flush=True)
    sys.exit(130)           # 128 + SIGINT, what shells report for Ctrl-C


def _parse(argv: list[str], help_lines: Callable[[], list[str]]) -> list[str]:
  """absl's parsing of `argv`; --help prints and exits 0, a usage error
  prints one line and exits 2."""
  booleans = [name for name in flags.FLAGS if flags.FLAGS[name].boolean]
  found, _ = argv_lib.parse(argv[1:], booleans)
  if any(f.name in _HELP for f in found):
    print(usage.help_text(sys.modules["__main__"].__doc__ or "",
                          flags.FLAGS.get_key_flags_for_module(sys.argv[0]),
                          help_lines()))
    sys.exit(0)
  verbose, value = (argv_lib.boolean(found, "verbose_errors"),
                    argv_lib.value(found, "config"))
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as e:
    fail(usage.flag_error(e, value), e, verbose)
  except (KeyError, AttributeError) as e:   # ml_collections: no such field
    line = usage.first_unknown_field(
        value or "", [k for k, _ in argv_lib.overrides(found)])
    if line is None:
      raise                       # not a config field: a bug, keep its trace
    fail(line, e, verbose)
  if "config" in flags.FLAGS and value is not None:
    try:
      flags.FLAGS["config"].value.get  # pylint: disable=pointless-statement
    except OSError as e:          # config_flags defers a failed load to here
      fail(usage.load_error(value, e), e, verbose)
  return rest


def command(main: Callable[[], Any], help_lines=list, *key_flags) -> None:
  """Runs a launch script's `main()` under absl: its `ConfigError` is one
  line, `--help` lists the `key_flags` (and the script's own) and
  `help_lines()`."""
  verbose = flags.DEFINE_bool("verbose_errors", False, "On a usage error, "
                              "print the traceback (and the config).")
  for holder in key_flags + (verbose,):
    flags.FLAGS.register_key_flag_for_module(sys.argv[0],
                                             flags.FLAGS[holder.name])
  logs.install()

  def _main(argv):
    if len(argv) > 1:
      fail(f"unexpected arguments {argv[1:]} (flags are --name=value)")
    try:
      main()
    except ConfigError as e:
      config = flags.FLAGS["config"].value if "config" in flags.FLAGS else None
      fail(str(e), e, verbose.value, config)

  app.run(_main, flags_parser=lambda argv: _parse(argv, help_lines))


def main(run: Callable[[Any, str], Any], check: Callable[[Any], None],
         configs_dir: str | pathlib.Path, training_only: bool) -> None:
  """`command` calling `check(config)`, then `run(config, workdir)` in
  the processes of a multi-host run if the flags say so; --help lists the
  configs of `configs_dir` (training configs only if `training_only`)."""
  config = config_flags.DEFINE_config_file(
      "config", None, f"A {'training ' * training_only}config of configs/ "
      "(below), FILE[:ARG,...]; --config.x=y overrides a field.",
      lock_config=True)
  workdir = flags.DEFINE_string("workdir", None, "Directory for figures, "
                                "tables, metrics, checkpoints, config.json.")
  show = flags.DEFINE_bool("print_config", False, "Print the resolved, "
                           "checked config and exit.")
  address = flags.DEFINE_string(
      "coordinator_address", None, "Multi-host: HOST:PORT of process 0, the "
      "same on every host, with --num_processes and --process_id.")
  count = flags.DEFINE_integer("num_processes", None, "Multi-host: how "
                               "many processes.", lower_bound=1)
  index = flags.DEFINE_integer("process_id", None, "Multi-host: this "
                               "process, 0 .. num_processes - 1.",
                               lower_bound=0)
  patience = flags.DEFINE_float(
      "peer_timeout_s", peers.TIMEOUT_S, "Multi-host: seconds a silent "
      "process is tolerated before the others stop (exit 75).")

  def body():
    if config.value is None:
      raise ConfigError(usage.missing_config(
          f"launch/{pathlib.Path(sys.argv[0]).name}"))
    check(config.value)
    if show.value:
      print(config.value, end="", flush=True)
      return
    if not workdir.value:
      raise ConfigError("--workdir is required (the run's directory).")
    from qkspec.runtime import processes  # pylint: disable=g-import-not-at-top
    processes.start(address.value, count.value, index.value,
                    cluster=bool(config.value.get("multihost")),
                    peer_timeout_s=patience.value)
    with exit_on_interrupt(flags.FLAGS.verbose_errors,
                           shlex.join(sys.orig_argv)), peers.watched():
      run(config.value, workdir.value)

  command(body, lambda: usage.config_help(configs_dir, training_only),
          config, workdir, show, address, count, index, patience)
