"""Tests for qkspec.runtime.logs: the libraries' noise kept out of the logs."""
import logging
import sys
import types

from absl.testing import absltest

from qkspec.runtime import logs


def _unraisable(error, source=None):
  return types.SimpleNamespace(exc_value=error, object=source, exc_type=type(
      error), exc_traceback=None, err_msg=None)


def _coroutine_from(path: str):
  """A closed coroutine whose code says it was written in `path`."""
  namespace = {}
  exec(compile("async def read():\n  pass\n", path, "exec"), namespace)  # pylint: disable=exec-used
  coroutine = namespace["read"]()
  coroutine.close()
  return coroutine


class LogsTest(absltest.TestCase):

  def test_only_the_missing_libtpu_note_is_dropped(self):
    logs.install()
    logs.install()
    logger = logging.getLogger("jax._src.xla_bridge")
    self.assertLen([f for f in logger.filters
                    if isinstance(f, logs._NoTpuFilter)], 1)  # pylint: disable=protected-access

    def kept(message):
      return logger.filter(logger.makeRecord(
          logger.name, logging.INFO, __file__, 1, message, (), None))

    self.assertFalse(kept("Unable to initialize backend 'tpu': INTERNAL: "
                          "Failed to open libtpu.so: libtpu.so: cannot open "
                          "shared object file: No such file or directory"))
    self.assertTrue(kept("Unable to initialize backend 'tpu': "
                         "ABORTED: the TPU is in use by another process"))
    self.assertTrue(kept("Unable to initialize backend 'cuda': no GPU"))

  def test_only_the_errors_of_abandoned_reads_are_dropped(self):
    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
      logs.quiet_abandoned_reads()
      logs.quiet_abandoned_reads()        # one hook, not two
      closed = RuntimeError("Event loop is closed")
      read = Exception("Encountered error while reading array index")
      read.__cause__ = GeneratorExit()
      orbax = _coroutine_from("/site-packages/orbax/checkpoint/x.py")
      mine = _coroutine_from("/work/qkspec/training/x.py")
      for u in (_unraisable(closed), _unraisable(read, orbax)):
        sys.unraisablehook(u)
      self.assertEmpty(seen)
      kept = [_unraisable(read, mine), _unraisable(ValueError("x"), orbax),
              _unraisable(RuntimeError("another"))]
      for u in kept:
        sys.unraisablehook(u)
      self.assertEqual(seen, kept)
    finally:
      sys.unraisablehook = previous


if __name__ == "__main__":
  absltest.main()
