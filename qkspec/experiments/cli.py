"""The absl command line shared by every launch script: --config, --workdir.

A launch script is its docstring plus `cli.main(library_function)`; the
function receives the resolved ConfigDict (after `:arg` and `--config.x=y`
overrides) and the workdir.
"""
from typing import Any, Callable

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags


def main(run: Callable[[Any, str], Any], what: str = "config") -> None:
  """Defines --config and --workdir, then calls `run(config, workdir)`."""
  config = config_flags.DEFINE_config_file(
      "config", None, f"Path to a {what} file (append :smoke for a tiny "
      "run).", lock_config=True)
  workdir = flags.DEFINE_string(
      "workdir", None, "Directory for figures, tables, metrics, checkpoints "
      "and config.json.")
  flags.mark_flags_as_required(["config", "workdir"])

  def _main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    logging.info("config:\n%s", config.value)
    run(config.value, workdir.value)

  app.run(_main)
