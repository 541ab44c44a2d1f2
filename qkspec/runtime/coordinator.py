"""The coordination service of a multi-host run, in a process of its own.

jax runs its coordination service inside process 0. When process 0 dies,
the other processes lose the service at once and jax aborts them with a
native crash dump before anything can say what happened. `spawn` runs the
service beside process 0 in a small process of its own instead (process
0's jax is handed a service of its own that no process uses): it outlives
process 0, so the others notice the loss (`qkspec.runtime.peers`), say so
in one line and exit. Its tasks are recoverable, so that it never aborts
the living for the dead. It ignores Ctrl-C and SIGTERM (the run stops on
them and then ends it) and exits once process 0 has gone and no process is
connected, or `linger_s` after process 0 has gone.

  python -m qkspec.runtime.coordinator PORT NUM_PROCESSES TIMEOUT_S
"""
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

from qkspec.config import ConfigError

_READY = "ready"


def log_path(port: int) -> str:
  return os.path.join(tempfile.gettempdir(), f"qkspec_coordinator_{port}.log")


def spawn(address: str, num_processes: int, timeout_s: float,
          wait_s: float = 120.0) -> str:
  """Starts the service for `address` (HOST:PORT of process 0) and waits
  until it listens; the address for jax's own, unused service.

  Raises:
    ConfigError: the service could not listen on PORT (taken?).
  """
  port = int(address.rsplit(":", 1)[1])
  with open(log_path(port), "w") as log:
    child = subprocess.Popen(
        [sys.executable, "-m", "qkspec.runtime.coordinator", str(port),
         str(num_processes), str(timeout_s)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
        text=True)
  ready, _, _ = select.select([child.stdout], [], [], wait_s)
  if not ready or child.stdout.readline().strip() != _READY:
    child.kill()
    raise ConfigError(
        f"--coordinator_address={address}: the coordination service could "
        f"not listen on port {port} (in use?); see {log_path(port)}.")
  return "127.0.0.1:0"


def _connections(port: int) -> int | None:
  """Established TCP connections to local `port` (None: unknown here)."""
  count, hexport = 0, f"{port:04X}"
  for name in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
      with open(name) as f:
        rows = [line.split() for line in f.readlines()[1:]]
    except OSError:
      return None
    count += sum(1 for r in rows if r[1].rsplit(":", 1)[1] == hexport
                 and r[3] == "01")
  return count


def serve(port: int, num_processes: int, timeout_s: float,
          parent: int) -> None:
  """Runs the service until `parent` (process 0) has gone and nobody is
  connected, or `linger_s` = 3 `timeout_s` later."""
  for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, signal.SIG_IGN)
  from jax._src.lib import _jax  # pylint: disable=g-import-not-at-top
  service = _jax.get_distributed_runtime_service(
      f"[::]:{port}", num_processes, heartbeat_timeout=int(2 * timeout_s),
      recoverable=True)
  print(_READY, flush=True)
  while os.getppid() == parent:
    time.sleep(0.5)
  linger_s, gone = 3 * timeout_s, time.monotonic()
  while time.monotonic() - gone < linger_s and _connections(port) != 0:
    time.sleep(0.5)
  service.shutdown()


if __name__ == "__main__":
  serve(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), os.getppid())
