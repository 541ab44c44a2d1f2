"""Tests for qkspec/experiments/figure_writer.py: figures drawn in other
processes are the PNGs this process draws."""
import os
import tempfile
from unittest import mock

from absl.testing import absltest
import numpy as np

from qkspec.experiments import figure_writer
from qkspec.experiments.figure_writer import plt


def _figures(n: int) -> list:
  """`n` figures unlike one another: lines, a title, constrained layout."""
  out = []
  for i in range(n):
    fig, ax = plt.subplots(1, 2, figsize=(4, 2), layout="constrained")
    x = np.linspace(0, 1, 50)
    ax[0].plot(x, np.sin((i + 1) * 3 * x), label=f"k = {i}")
    ax[0].legend()
    ax[1].semilogy(x, np.exp(i * x) + 1)
    fig.suptitle(f"figure {i}: $\\kappa_2$")
    out.append(fig)
  return out


def _unpicklable(n: int) -> list:
  """`_figures`, the second with a scale of local functions (which pickle
  refuses)."""
  figs = _figures(n)
  figs[1].axes[1].set_yscale("function", functions=(lambda x: x ** 0.5,
                                                    lambda y: y ** 2))
  return figs


class FigureWriterTest(absltest.TestCase):

  def _save(self, tmp: str, sub: str, workers: int, n: int = 3,
            make=_figures) -> list:
    os.makedirs(os.path.join(tmp, sub))
    pngs = [os.path.join(tmp, sub, f"f{i}.png") for i in range(n)]
    figs = make(n)
    figures = figure_writer.Figures(workers)
    for i, (fig, png) in enumerate(zip(figs, pngs)):
      figures.add(fig, png, 60 + 10 * i)
    figures.draw()
    for fig in figs:                                # every figure closed
      self.assertFalse(plt.fignum_exists(fig.number))
    return [open(png, "rb").read() for png in pngs]

  def test_processes_draw_the_pngs_this_process_draws(self):
    with tempfile.TemporaryDirectory() as tmp:
      here = self._save(tmp, "here", 1)
      side = self._save(tmp, "side", 2)
    self.assertLen(set(here), 3)                    # three distinct figures
    self.assertEqual(here, side)                    # byte for byte

  def test_a_figure_is_closed_when_added_so_few_are_ever_open(self):
    with tempfile.TemporaryDirectory() as tmp:
      figures = figure_writer.Figures(2)
      made = _figures(3)
      for i, fig in enumerate(made):
        figures.add(fig, os.path.join(tmp, f"f{i}.png"), 60)
        self.assertFalse(plt.fignum_exists(fig.number))
      self.assertEmpty(os.listdir(tmp))             # drawn by `draw`
      figures.draw()
      self.assertLen(os.listdir(tmp), 3)

  def test_a_figure_that_does_not_pickle_is_drawn_here(self):
    with tempfile.TemporaryDirectory() as tmp:
      here = self._save(tmp, "here", 1, make=_unpicklable)
      side = self._save(tmp, "side", 2, make=_unpicklable)
    self.assertEqual(here, side)

  def test_a_share_whose_process_fails_is_drawn_here(self):
    with tempfile.TemporaryDirectory() as tmp:
      here = self._save(tmp, "here", 1, 2)
      with mock.patch.object(figure_writer, "MODULE", "no_such_module"):
        side = self._save(tmp, "side", 2, 2)
    self.assertEqual(here, side)


if __name__ == "__main__":
  absltest.main()
