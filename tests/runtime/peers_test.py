"""Tests for qkspec.runtime.peers: a lost process noticed, one line said.

The watchdog is driven by hand here (`beat`, `lost`, `report`) on a fake
key-value store and clock; tests/system/multihost_test.py kills a real
process of two.
"""
import contextlib
import io

from absl.testing import absltest

from qkspec.config import ConfigError
from qkspec.runtime import peers


class _Store:
  """jax's key-value client, in memory; `down`: every call fails."""

  def __init__(self):
    self.values, self.down = {}, False

  def key_value_set(self, key, value, allow_overwrite=False):
    del allow_overwrite
    if self.down:
      raise RuntimeError("UNAVAILABLE: Socket closed")
    self.values[key] = value

  def key_value_dir_get(self, prefix):
    if self.down:
      raise RuntimeError("UNAVAILABLE: Socket closed")
    return sorted((k, v) for k, v in self.values.items()
                  if k.startswith(prefix))


class _Clock:

  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def _watchdogs(n=3, timeout_s=10.0):
  """`n` watchdogs on one store and clock, and what they exited with."""
  store, clock, exits = _Store(), _Clock(), []
  dogs = [peers.Watchdog(store, i, n, timeout_s, tick_s=1.0,
                         exit_fn=exits.append, clock=clock)
          for i in range(n)]
  return dogs, store, clock, exits


def _tick(dogs, clock, seconds=1.0):
  clock.now += seconds
  for dog in dogs:
    dog.beat()


class WatchdogTest(absltest.TestCase):

  def test_a_silent_process_is_lost_after_the_timeout_not_before(self):
    dogs, _, clock, _ = _watchdogs()
    for _ in range(30):                 # everyone beats: nobody is lost
      _tick(dogs, clock)
      self.assertEqual([d.lost() for d in dogs], [None] * 3)
    for second in range(1, 13):         # process 1 stops beating
      _tick([dogs[0], dogs[2]], clock)
      if second <= 10:                  # its last beat, read within a tick
        self.assertEqual((dogs[0].lost(), dogs[2].lost()), (None, None))
    self.assertEqual((dogs[0].lost(), dogs[2].lost()), (1, 1))

  def test_a_process_never_heard_is_lost_after_the_timeout(self):
    dogs, _, clock, _ = _watchdogs(n=2)
    for second in range(1, 12):
      _tick(dogs[:1], clock)
      self.assertEqual(dogs[0].lost(), 1 if second > 10 else None)

  def test_a_process_that_said_done_is_not_lost(self):
    dogs, _, clock, _ = _watchdogs()
    _tick(dogs, clock)
    dogs[2].stop(done=True)
    for _ in range(20):
      _tick(dogs[:2], clock)
    self.assertEqual((dogs[0].lost(), dogs[1].lost()), (None, None))

  def test_a_silent_service_is_process_0_lost(self):
    dogs, store, clock, _ = _watchdogs()
    _tick(dogs, clock)
    store.down = True                   # calls fail at once (process 0 gone)
    for second in range(1, 13):
      clock.now += 1.0
      for dog in dogs[1:]:
        with contextlib.suppress(RuntimeError):
          dog.beat()
      self.assertEqual(dogs[1].lost(), 0 if second > 10 else None, second)

  def test_a_call_that_hangs_is_process_0_lost(self):
    dogs, _, clock, _ = _watchdogs(n=2)
    _tick(dogs, clock)
    dogs[1]._calling = clock.now        # pylint: disable=protected-access
    clock.now += 10.5
    self.assertEqual(dogs[1].lost(), 0)

  def test_a_process_that_was_held_up_judges_nobody(self):
    dogs, _, clock, _ = _watchdogs(n=2)
    _tick(dogs, clock)
    clock.now += 30.0                   # neither watchdog ran for 30 s
    self.assertIsNone(dogs[0].lost())
    _tick(dogs, clock)                  # news again: the other is alive
    self.assertIsNone(dogs[0].lost())

  def test_the_line_names_the_process_the_step_and_the_checkpoint(self):
    dogs, _, _, exits = _watchdogs()
    dog = dogs[0]
    self.assertEqual(dog.line(2), "qkspec: process 2 stopped answering before "
                     "the first step; no checkpoint was written yet; rerun "
                     "the same command on every host to start again")
    dog.at_step(46)
    dog.watch_checkpoints(lambda: 44)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
      dog.report(1)
    self.assertEqual(err.getvalue(), "qkspec: process 1 stopped answering "
                     "after step 46; the last checkpoint is step 44; rerun "
                     "the same command on every host to resume\n")
    self.assertEqual(exits, [peers.LOST])
    self.assertStartsWith(dog.line(0), "qkspec: the coordination service "
                          "beside process 0 stopped answering after step 46")

  def test_watched_says_done_on_success_a_signal_or_a_usage_error(self):
    for error in (None, KeyboardInterrupt, ConfigError):
      dogs, store, _, _ = _watchdogs(n=2)
      peers._active = dogs[0]           # pylint: disable=protected-access
      with contextlib.suppress(KeyboardInterrupt, ConfigError):
        with peers.watched():
          if error:
            raise error
      self.assertEqual(store.values["qkspec/peers/0"], "done", error)
      self.assertIsNone(peers._active)  # pylint: disable=protected-access

  def test_watched_waits_for_a_verdict_after_an_error(self):
    dogs, store, _, exits = _watchdogs(n=2, timeout_s=0.2)
    waited = []
    dogs[0].settle = lambda: waited.append(True)
    peers._active = dogs[0]             # pylint: disable=protected-access
    with self.assertRaises(RuntimeError):
      with peers.watched():
        raise RuntimeError("a collective failed")
    self.assertEqual((waited, exits), ([True], []))
    self.assertNotIn("qkspec/peers/0", store.values)   # no "done"


if __name__ == "__main__":
  absltest.main()
