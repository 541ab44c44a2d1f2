"""Figures drawn to PNG files side by side, in processes of their own.

Drawing a figure (matplotlib's `savefig`: its constrained layout, text and
rasterising) is most of what a report costs: the section's report of six
runs spends ~4.5 s of 5.5 in a dozen `savefig` calls on one core
(cProfile, bench/gpu_results.md (23)), after the GPU's last step. The
figures do not depend on one another, so `Figures` pickles each as it is
made (a matplotlib figure pickles whole, unless it holds a local
function) and then has up to one
`python -m qkspec.experiments.figure_writer` process per core draw a
share, each importing matplotlib alone (not jax). The PNGs are byte for
byte the ones `fig.savefig(png, dpi=dpi)` writes in this process
(tests/figure_writer_test.py). A figure that does not pickle is drawn
here, and so is the share of a process that fails.
"""
import os
import pickle
import subprocess
import sys
import tempfile

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

MODULE = "qkspec.experiments.figure_writer"


def cores() -> int:
  """The cores this process may run on."""
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:              # macOS
    return os.cpu_count() or 1


def _draw(share: list[tuple[bytes, str, int]]) -> None:
  """Each pickled figure of `share` saved to its PNG at its dpi."""
  for blob, png, dpi in share:
    fig = pickle.loads(blob)
    fig.savefig(png, dpi=dpi)
    plt.close(fig)


class Figures:
  """The PNGs of a report: `add` each figure as it is made, then `draw`.

  With `workers` (default: `cores()`) above 1, `add` pickles a figure and
  closes it (so that a report's dozens are never open at once) and `draw`
  has up to `workers` processes draw them, dealt round in order; a figure
  that does not pickle (a scale given as local functions, say), or any
  with one worker, is drawn by `add` at once, here."""

  def __init__(self, workers: int | None = None):
    self.workers = workers or cores()
    self.blobs = []

  def add(self, fig, png, dpi: int) -> None:
    if self.workers > 1:
      try:
        self.blobs.append((pickle.dumps(fig), str(png), dpi))
        plt.close(fig)
        return
      except Exception:  # pylint: disable=broad-except
        pass                          # unpicklable: drawn here
    fig.savefig(png, dpi=dpi)
    plt.close(fig)

  def draw(self) -> None:
    """Draws the figures `add` kept; a share whose process fails, here."""
    blobs, self.blobs = self.blobs, []
    n = min(self.workers, len(blobs))
    if n <= 1:
      _draw(blobs)
      return
    shares = [blobs[i::n] for i in range(n)]
    with tempfile.TemporaryDirectory(prefix="figure_writer") as tmp:
      procs = []
      for i, share in enumerate(shares):
        name = os.path.join(tmp, f"share{i}.pkl")
        with open(name, "wb") as f:
          pickle.dump(share, f)
        procs.append(subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-m", MODULE, name], stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE))
      for proc, share in zip(procs, shares):
        _, err = proc.communicate()
        if proc.returncode != 0:      # drawn here instead
          print(f"figure_writer: a process failed ({proc.returncode}): "
                f"{err.decode(errors='replace')[-500:]}; drawing its "
                f"{len(share)} figure(s) here", file=sys.stderr)
          _draw(share)


def main(argv: list[str]) -> None:
  """`python -m qkspec.experiments.figure_writer SHARE.pkl`: draws the
  share `Figures.draw` pickled there."""
  with open(argv[1], "rb") as f:
    _draw(pickle.load(f))


if __name__ == "__main__":
  main(sys.argv)
