r"""Turns a training workdir into the paper's panels (Figs. 6-7, 8-12).

  python launch/plot_training.py --workdir /tmp/tt

Writes fig6_curves.png, fig6_vs_kappa2.png (kappa2 sweeps), rho_heatmap.png
(Fig. 7) and training_curves.png into the workdir; see
qkspec/plots/training_figures.py.
"""
from absl import flags
from absl import logging

from qkspec import cli
from qkspec.config import ConfigError

_WORKDIR = flags.DEFINE_string("workdir", None, "A launch/train.py workdir.")
_LAYER = flags.DEFINE_integer("layer", 0, "Layer of the rho heat map.")


def main():
  if not _WORKDIR.value:
    raise ConfigError("--workdir is required: a launch/train.py workdir.")
  from qkspec.plots import training_figures  # pylint: disable=g-import-not-at-top
  for path in training_figures.plot_workdir(_WORKDIR.value, _LAYER.value):
    logging.info("wrote %s", path)


if __name__ == "__main__":
  cli.command(main)
