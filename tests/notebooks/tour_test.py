"""notebooks/tour.ipynb: its cells run headless, the committed notebook is
its source run in order with its outputs, README shows its picture, and its
first cell installs qkspec only where qkspec is missing."""
import importlib.util
import os
import re
from unittest import mock

from absl.testing import absltest
import nbformat

import testutil

_spec = importlib.util.spec_from_file_location(
    "run_tour", testutil.ROOT / "notebooks" / "run_tour.py")
run_tour = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_tour)


def _code_cells(notebook) -> list:
  return [c for c in notebook.cells if c.cell_type == "code"]


def _check_ran_in_order(test, cells) -> None:
  """Each of `cells` ran in turn, drew one figure per `plt.show()` and
  raised nothing."""
  for i, cell in enumerate(cells):
    test.assertEqual(cell.execution_count, i + 1, cell.source[:80])
    test.assertEqual(len(run_tour.pngs(cell)),
                     cell.source.count("plt.show()"), cell.source[:80])
    test.assertNotIn("error", [o["output_type"] for o in cell.outputs],
                     cell.source[:80])


class RunsHeadlessTest(absltest.TestCase):

  def test_every_cell_runs_and_a_failing_cell_fails_the_run(self):
    # The kernel shares the tests' XLA flags (conftest.py) and their
    # compilation cache. One kernel: the tour's cells, then a planted
    # failing cell; nbclient fills in the notebook's outputs as it goes.
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=testutil.CACHE_DIR,
               JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    notebook = run_tour.read_source()
    notebook.cells.append(nbformat.v4.new_code_cell(
        "raise ValueError('planted')"))
    with self.assertRaisesRegex(Exception, "planted"):
      run_tour.execute(notebook, quick=True, env=env)
    cells = _code_cells(notebook)
    _check_ran_in_order(self, cells[:-1])
    self.assertEqual(cells[-1].outputs[0]["output_type"], "error")
    # the README picture comes out of the run, a PNG
    self.assertTrue(run_tour.figure_png(notebook).startswith(b"\x89PNG"))


class CommittedNotebookTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.committed = nbformat.read(run_tour.NOTEBOOK, as_version=4)

  def test_cells_are_the_source(self):
    source = run_tour.read_source()
    self.assertEqual(
        [(c.cell_type, c.source) for c in self.committed.cells],
        [(c.cell_type, c.source) for c in source.cells],
        "tour.ipynb is not tour.py: python notebooks/run_tour.py")

  def test_ran_in_order_with_its_outputs(self):
    cells = _code_cells(self.committed)
    self.assertGreater(len(cells), 10)
    _check_ran_in_order(self, cells)
    for cell in cells:
      self.assertNotIn("stderr", [o.get("name") for o in cell.outputs],
                       cell.source[:80])
    printing = [c for c in cells if "print(" in c.source]
    self.assertTrue(all(any(o.get("name") == "stdout" for o in c.outputs)
                        for c in printing))

  def test_readme_shows_its_figure(self):
    png = run_tour.figure_png(self.committed)
    self.assertEqual(run_tour.FIGURE.read_bytes(), png)
    self.assertLess(len(png), 200_000)
    link = f"]({run_tour.FIGURE.relative_to(testutil.ROOT)})"
    self.assertTrue(link in (testutil.ROOT / "README.md").read_text(),
                    f"README shows no {link}")


class ColabCellTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    self.cell = _code_cells(run_tour.read_source())[0].source
    self.repository = re.search(r'REPOSITORY = "(.+?)"', self.cell)[1]

  def _run(self, qkspec_spec) -> list:
    """The first cell's subprocess calls, with `find_spec("qkspec")`."""
    find_spec = importlib.util.find_spec
    with mock.patch("importlib.util.find_spec", side_effect=lambda name: (
        qkspec_spec if name == "qkspec" else find_spec(name))), \
        mock.patch("subprocess.run") as run:
      exec(compile(self.cell, "tour.ipynb cell 1", "exec"), {})  # pylint: disable=exec-used
    return [c.args[0] for c in run.call_args_list]

  def test_installs_where_qkspec_is_missing(self):
    clone, install = self._run(None)
    self.assertEqual(clone[:2], ["git", "clone"])
    self.assertEqual(clone[-2:], [self.repository, "qkspec"])
    self.assertEqual(install[1:4], ["-m", "pip", "install"])
    self.assertEqual(install[-1], "./qkspec")

  def test_does_nothing_where_qkspec_imports(self):
    self.assertEqual(self._run(importlib.util.find_spec("qkspec")), [])

  def test_readme_badge_opens_this_notebook(self):
    owner_repo = self.repository.removeprefix("https://github.com/")
    readme = (testutil.ROOT / "README.md").read_text()
    badge = ("(https://colab.research.google.com/github/"
             f"{owner_repo}/blob/main/notebooks/tour.ipynb)")
    self.assertTrue(badge in readme, f"README has no link {badge}")
    # the badge sits with, not instead of, README's two set-up commands
    top = readme[:readme.index("\n## ")]
    self.assertEqual(top.count(".venv/bin/pip install -e"), 2)
    self.assertIn("colab.research.google.com", top)


if __name__ == "__main__":
  absltest.main()
