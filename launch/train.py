r"""Trains one config, or a vmapped sweep if the config has `sweep` values.

  python launch/train.py --config configs/theory_task.py --workdir /tmp/tt
  python launch/train.py --config configs/locater_wt2.py \
      --config.data.manual_dir=../shared/data/wikitext-2 --workdir /tmp/wt2

Add `:smoke` to the config path for a tiny run and `--config.x=y` to
override a field. Rerunning with the same workdir resumes from the latest
checkpoint. Plot with launch/plot_training.py. See each config's docstring.
"""

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from qkspec import train

_CONFIG = config_flags.DEFINE_config_file(
    "config", None, "Path to a training config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", None, "Directory for checkpoints, metrics and config.json.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  logging.info("config:\n%s", _CONFIG.value)
  train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
  app.run(main)
