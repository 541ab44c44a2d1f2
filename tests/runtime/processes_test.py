"""Tests for qkspec.runtime.processes and coordinator: the flags checked
before any process joins (tests/system/multihost_test.py joins two)."""
import socket

from absl.testing import absltest

from qkspec.config import ConfigError
from qkspec.runtime import coordinator
from qkspec.runtime import processes
import testutil


class StartTest(absltest.TestCase):

  def test_one_process_joins_nothing(self):
    self.assertFalse(processes.start())
    self.assertFalse(processes.start("127.0.0.1:1", 1, 0))

  def test_bad_flags_are_one_line_each(self):
    for flags, want in (
        ((None, 2, None), "--coordinator_address, --process_id missing"),
        (("h:1", 2, 2), r"--process_id=2 must be in \[0, --num_processes=2\)"),
        (("h", 2, 0), "--coordinator_address=h must be HOST:PORT"),
        (("h:x", 2, 0), "--coordinator_address=h:x must be HOST:PORT"),
        (("1234", 2, 0), "--coordinator_address=1234 must be HOST:PORT")):
      with self.assertRaisesRegex(ConfigError, want):
        processes.start(*flags)
    with self.assertRaisesRegex(ConfigError, "--peer_timeout_s=0 must be"):
      processes.start("h:1", 2, 0, peer_timeout_s=0)

  def test_no_cluster_to_join_is_one_line(self):
    with self.assertRaisesRegex(ConfigError, "--config.multihost=True: jax "
                                "found no cluster to join"):
      processes.start(cluster=True)

  def test_processes_join_in_one_place(self):
    calls = [str(path.relative_to(testutil.ROOT))
             for path in sorted((testutil.ROOT / "qkspec").rglob("*.py"))
             for line in path.read_text().splitlines()
             if "distributed.initialize(" in line]
    self.assertEqual(calls, ["qkspec/runtime/processes.py"])


class CoordinatorTest(absltest.TestCase):

  def test_counts_the_connections_to_its_port(self):
    with socket.socket() as server:
      server.bind(("127.0.0.1", 0))
      server.listen()
      port = server.getsockname()[1]
      if coordinator._connections(port) is None:  # pylint: disable=protected-access
        self.skipTest("no /proc/net/tcp here")
      self.assertEqual(coordinator._connections(port), 0)  # pylint: disable=protected-access
      with socket.create_connection(("127.0.0.1", port)):
        accepted, _ = server.accept()
        self.assertEqual(coordinator._connections(port), 1)  # pylint: disable=protected-access
        accepted.close()


if __name__ == "__main__":
  absltest.main()
