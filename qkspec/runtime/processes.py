"""Joining the processes of a multi-host run: the one place where qkspec
calls `jax.distributed.initialize`.

`start` takes the command line's three flags, or finds the processes in
the cluster's environment (a TPU pod slice, SLURM, Open MPI), runs the
coordination service beside process 0 (`coordinator`), joins, and starts
this process's `peers.Watchdog`, which notices a lost process within
`peer_timeout_s` seconds. jax's own heartbeat timeout is twice that: its
abort, with a native crash dump, stays the backstop behind qkspec's line.
`qkspec.training.loop` finds the processes joined.
"""
from absl import logging
import jax

from qkspec.config import ConfigError
from qkspec.runtime import coordinator
from qkspec.runtime import peers

def _from_cluster() -> tuple[str, int, int, list[int] | None]:
  """(coordinator address, process count, process id, local device ids)
  as jax finds them in a TPU pod slice's, SLURM's or Open MPI's
  environment; ConfigError where it finds no cluster."""
  from jax._src import clusters  # pylint: disable=g-import-not-at-top
  try:
    found = clusters.ClusterEnv.auto_detect_unset_distributed_params(
        None, None, None, None, None, 300)
  except (ValueError, RuntimeError) as e:
    found, reason = (None,), str(e).splitlines()[0] if str(e) else repr(e)
  else:
    reason = "no TPU pod slice, SLURM or Open MPI environment"
  if None in found[:3]:
    raise ConfigError(
        f"--config.multihost=True: jax found no cluster to join ({reason}); "
        "on a TPU pod slice, SLURM or Open MPI it finds the processes "
        "itself, elsewhere pass --coordinator_address, --num_processes and "
        "--process_id.")
  return found


def _checked(coordinator_address: str | None, num_processes: int | None,
             process_id: int | None) -> bool:
  """Whether the three flags are given (all or none; ConfigError else)."""
  given = {"--coordinator_address": coordinator_address,
           "--num_processes": num_processes, "--process_id": process_id}
  missing = [k for k, v in given.items() if v is None]
  if len(missing) == len(given):
    return False
  if missing:
    raise ConfigError(f"a multi-host run needs --coordinator_address, "
                      f"--num_processes and --process_id; "
                      f"{', '.join(missing)} missing.")
  if not 0 <= process_id < num_processes:
    raise ConfigError(f"--process_id={process_id} must be in [0, "
                      f"--num_processes={num_processes}).")
  _, colon, port = coordinator_address.rpartition(":")
  if not colon or not port.isdigit():
    raise ConfigError(f"--coordinator_address={coordinator_address} must be "
                      "HOST:PORT.")
  return True


def start(coordinator_address: str | None = None,
          num_processes: int | None = None, process_id: int | None = None,
          *, cluster: bool = False,
          peer_timeout_s: float = peers.TIMEOUT_S) -> bool:
  """Joins this process to the others (given by the three flags, or found
  in the cluster's environment if `cluster`); whether it is one of
  several. Call it before anything touches a device.

  Raises:
    ConfigError: incomplete flags, `cluster` and no cluster found, or a
      port the coordination service cannot take.
  """
  if peer_timeout_s <= 0:
    raise ConfigError(f"--peer_timeout_s={peer_timeout_s} must be > 0.")
  devices = None
  if not _checked(coordinator_address, num_processes, process_id):
    if not cluster:
      return False
    coordinator_address, num_processes, process_id, devices = _from_cluster()
  if num_processes == 1:
    return False
  logging.info("process %d of %d: coordinator %s", process_id, num_processes,
               coordinator_address)
  bind = None
  if process_id == 0:
    bind = coordinator.spawn(coordinator_address, num_processes,
                             peer_timeout_s)
  jax.distributed.initialize(
      coordinator_address=coordinator_address, num_processes=num_processes,
      process_id=process_id, local_device_ids=devices,
      coordinator_bind_address=bind,
      heartbeat_timeout_seconds=int(2 * peer_timeout_s + 1))
  from jax._src import distributed  # pylint: disable=g-import-not-at-top
  peers.start(distributed.global_state.client, process_id, num_processes,
              peer_timeout_s)
  return True
