"""Runs the tour notebook headless and writes it with its outputs.

  python notebooks/run_tour.py     # tour.py -> tour.ipynb, tour_fig5.png

`tour.py` (jupytext's percent format) is the notebook's source. This
executes its cells in a fresh Jupyter kernel, in notebooks/, at full size,
and writes `tour.ipynb` with every output and `tour_fig5.png`, README's
picture: the PNG of the cell tagged `readme-figure`. Needs the test extra
(`pip install -e ".[test]"`: nbclient, ipykernel, jupytext). The test suite
runs the same cells through `execute(..., quick=True)`.
"""
import base64
import os
import pathlib
import sys
import time

import jupytext
import nbclient
import nbformat

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "tour.py"
NOTEBOOK = HERE / "tour.ipynb"
FIGURE = HERE / "tour_fig5.png"
README_TAG = "readme-figure"
# what the notebook reads to shrink its training runs
QUICK_VARIABLE = "QKSPEC_TOUR_QUICK"


def read_source() -> nbformat.NotebookNode:
  """The notebook of `tour.py`'s cells, without outputs; each cell's id is
  its position (jupytext draws new random ids, a diff in every cell at
  every regeneration)."""
  notebook = jupytext.read(SOURCE)
  for i, cell in enumerate(notebook.cells):
    cell.id = f"cell-{i}"
  return notebook


def execute(notebook: nbformat.NotebookNode, quick: bool,
            timeout_s: int = 600,
            env: dict[str, str] | None = None) -> nbformat.NotebookNode:
  """Runs every cell in order in a new python3 kernel started in notebooks/;
  raises nbclient's CellExecutionError at the first cell that fails.
  `quick` sets `QUICK_VARIABLE` (fewer training steps); `env`, the kernel's
  environment (default: this process's)."""
  env = dict(os.environ if env is None else env)
  env.pop(QUICK_VARIABLE, None)
  if quick:
    env[QUICK_VARIABLE] = "1"
  client = nbclient.NotebookClient(
      notebook, timeout=timeout_s, kernel_name="python3",
      resources={"metadata": {"path": str(HERE)}})
  return client.execute(env=env)


def pngs(cell: nbformat.NotebookNode) -> list[str]:
  """The PNG outputs of a code cell, base64-encoded, in order."""
  return [o["data"]["image/png"] for o in cell.get("outputs", ())
          if "image/png" in o.get("data", {})]


def figure_png(notebook: nbformat.NotebookNode, tag: str = README_TAG
               ) -> bytes:
  """The PNG output of the one code cell tagged `tag`."""
  cells = [c for c in notebook.cells
           if tag in c.get("metadata", {}).get("tags", ())]
  if len(cells) != 1:
    raise ValueError(f"{len(cells)} cells are tagged {tag!r}, not one.")
  images = pngs(cells[0])
  if len(images) != 1:
    raise ValueError(f"the cell tagged {tag!r} has {len(images)} PNG "
                     "outputs, not one.")
  return base64.b64decode(images[0])


def main() -> None:
  start = time.perf_counter()
  notebook = execute(read_source(), quick=False)
  for cell in notebook.cells:       # when it ran: not worth a diff
    cell.metadata.pop("execution", None)
  nbformat.write(notebook, NOTEBOOK)
  FIGURE.write_bytes(figure_png(notebook))
  print(f"wrote {NOTEBOOK} and {FIGURE} in "
        f"{time.perf_counter() - start:.0f} s", file=sys.stderr)


if __name__ == "__main__":
  main()
