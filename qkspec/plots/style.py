"""matplotlib as every qkspec figure uses it: the Agg backend (no screen),
2-D subplots with the constrained layout, colours from a colormap, and a
PNG saved and closed. `style.plt` is matplotlib.pyplot on that backend."""
import pathlib

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

# The font sizes of the training and report figures.
FONT = {"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10,
        "legend.fontsize": 9}


def subplots(nrows: int, ncols: int, figsize: tuple[float, float],
             **kwargs):
  """`plt.subplots` with 2-D axes and, by default, the constrained layout."""
  kwargs.setdefault("layout", "constrained")
  return plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, **kwargs)


def colors(cmap: str, values: np.ndarray) -> np.ndarray:
  """RGBA colours of `values` under the matplotlib colormap `cmap`."""
  return plt.get_cmap(cmap)(values)


def save(fig, path, dpi: int = 120, tight: bool = False) -> str:
  """Draws `fig` to the PNG `path` (cropped to its content if `tight`) and
  closes it; the path."""
  fig.savefig(path, dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
  plt.close(fig)
  return str(path)


def save_figure(fig, workdir: pathlib.Path, name: str,
                dpi: int = 120) -> pathlib.Path:
  """Saves `fig` as `workdir/name.png`, cropped to its content, and closes
  it."""
  path = pathlib.Path(workdir) / f"{name}.png"
  save(fig, path, dpi, tight=True)
  return path
