"""Figures drawn to PNG files side by side, in processes of their own.

Drawing a figure (matplotlib's `savefig`: its constrained layout, text and
rasterising) is most of what a report costs: the section's report of six
runs spends ~4.5 s of 5.5 in a dozen `savefig` calls on one core
(cProfile, bench/gpu_results.md (23)), after the GPU's last step. The
figures do not depend on one another, so `save_all` pickles them (a
matplotlib figure pickles whole, unless it holds a local function) and
has up to one `python -m qkspec.experiments.figure_writer` process per
core draw a share, each importing matplotlib alone (not jax). The PNGs
are byte for byte the ones `fig.savefig(png, dpi=dpi)` writes in this
process (tests/figure_writer_test.py). A figure that does not pickle is
drawn here while the processes draw theirs, and so is the share of a
process that fails.
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


def save_all(jobs: list[tuple], workers: int | None = None) -> None:
  """Saves each `(figure, png path, dpi)` of `jobs` and closes the figure.

  With `workers` (default: `cores()`) above 1 and two jobs or more, the
  figures that pickle are drawn by up to `workers` processes (dealt round
  them in order) while this process draws those that do not (a scale
  given as local functions, say); else all here, one after another."""
  workers = workers or cores()
  here, blobs = [], []
  for fig, png, dpi in jobs:
    if workers > 1 and len(jobs) > 1:
      try:
        blobs.append((pickle.dumps(fig), str(png), dpi))
        plt.close(fig)
        continue
      except Exception:  # pylint: disable=broad-except
        pass                          # unpicklable: drawn here
    here.append((fig, png, dpi))
  n = min(workers, len(blobs))
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
    for fig, png, dpi in here:        # while the processes draw theirs
      fig.savefig(png, dpi=dpi)
      plt.close(fig)
    for proc, share in zip(procs, shares):
      _, err = proc.communicate()
      if proc.returncode != 0:        # drawn here instead
        print(f"figure_writer: a process failed ({proc.returncode}): "
              f"{err.decode(errors='replace')[-500:]}; drawing its "
              f"{len(share)} figure(s) here", file=sys.stderr)
        _draw(share)


def main(argv: list[str]) -> None:
  """`python -m qkspec.experiments.figure_writer SHARE.pkl`: draws the
  share `save_all` pickled there."""
  with open(argv[1], "rb") as f:
    _draw(pickle.load(f))


if __name__ == "__main__":
  main(sys.argv)
