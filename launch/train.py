r"""Trains one config, or a vmapped sweep if the config has `sweep` values.

  python launch/train.py --config configs/theory_task.py --workdir /tmp/tt
  python launch/train.py --config configs/locater_wt2.py \
      --config.data.manual_dir=../shared/data/wikitext-2 --workdir /tmp/wt2

Add `:smoke` to the config path for a tiny run and `--config.x=y` to
override a field; `--print_config` prints the resolved config and exits.
Rerunning with the same workdir resumes from the latest checkpoint. Plot
with launch/plot_training.py. See each config's docstring.
"""
import pathlib

from qkspec import cli
from qkspec.config import schema


def train(config, workdir):
  from qkspec.training import loop  # pylint: disable=g-import-not-at-top
  return loop.train_and_evaluate(config, workdir)


if __name__ == "__main__":
  cli.main(train, schema.validate,
           pathlib.Path(__file__).resolve().parents[1] / "configs",
           training_only=True)
