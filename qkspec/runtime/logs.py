"""What qkspec keeps out of its logs: the noise of the libraries it runs.

* jax's note that there is no libtpu, logged on every CPU or GPU run (a
  libtpu that is there but fails keeps its message);
* orbax's INFO chatter, dozens of lines per checkpoint;
* the errors of the reads orbax abandons when a damaged checkpoint fails
  to restore: tensorstore completes them later, into an event loop orbax
  has closed ("Event loop is closed"), and their coroutines, closed when
  collected, turn GeneratorExit into an Exception carrying a whole
  TensorStore spec (hundreds of lines each). The checkpoint's one warning
  line says what failed.

`install()` sets up the first two (idempotent; the command line calls it
and importing `qkspec.training.checkpoint` does); `quiet_abandoned_reads()`
the third, from a failed restore on; within `orbax_silenced()` orbax logs
nothing (its warnings about a checkpoint that fails to restore, which the
checkpoint's line names).
"""
import contextlib
import logging
import os
import sys

from absl import logging as absl_logging

_ORBAX = f"{os.sep}orbax{os.sep}"


class _NoTpuFilter(logging.Filter):
  """Drops jax's note that there is no libtpu."""

  def filter(self, record: logging.LogRecord) -> bool:
    message = record.getMessage()
    return not (message.startswith("Unable to initialize backend 'tpu'")
                and "cannot open shared object file" in message)


class _QuietOrbax(logging.Filter):
  """Drops orbax's records below `level`."""

  def __init__(self, level: int = logging.WARNING):
    super().__init__()
    self.level = level

  def filter(self, record: logging.LogRecord) -> bool:
    return record.levelno >= self.level or _ORBAX not in record.pathname


def _add(logger: logging.Logger, kind: type[logging.Filter]) -> None:
  if not any(isinstance(f, kind) for f in logger.filters):
    logger.addFilter(kind())


def install() -> None:
  """Installs the filters of jax's TPU note and orbax's chatter."""
  _add(logging.getLogger("jax._src.xla_bridge"), _NoTpuFilter)
  _add(absl_logging.get_absl_logger(), _QuietOrbax)


@contextlib.contextmanager
def orbax_silenced():
  """Within, orbax logs nothing."""
  logger = absl_logging.get_absl_logger()
  silence = _QuietOrbax(logging.CRITICAL + 1)
  logger.addFilter(silence)
  try:
    yield
  finally:
    logger.removeFilter(silence)


def _abandoned_read(unraisable) -> bool:
  """Whether an unraisable error comes from a read orbax abandoned."""
  error, source = unraisable.exc_value, unraisable.object
  if isinstance(error, RuntimeError) and str(error) == "Event loop is closed":
    return True
  code = getattr(source, "cr_code", None)
  return (isinstance(error.__cause__, GeneratorExit) and code is not None
          and _ORBAX in code.co_filename)


def quiet_abandoned_reads() -> None:
  """From now on, drops the unraisable errors of orbax's abandoned reads
  (passing every other to the hook before; idempotent). They arrive while
  the run goes on and when the process exits, so the hook stays."""
  previous = sys.unraisablehook
  if getattr(previous, "qkspec_abandoned_reads", False):
    return

  def hook(unraisable):
    if not _abandoned_read(unraisable):
      previous(unraisable)

  hook.qkspec_abandoned_reads = True
  sys.unraisablehook = hook
