"""The hand-written WikiText-2 fixture of the data and training tests."""
import pathlib
import shutil
import tempfile

from qkspec.config import defaults

# tests/data/testdata/wikitext2_tiny/ is hand-written in the official
# format; its counts and ids below were worked out by hand.
WIKITEXT2_TINY = (pathlib.Path(__file__).resolve().parent / "data"
                  / "testdata" / "wikitext2_tiny")
# Train vocabulary in order of first appearance (by hand).
WIKITEXT2_TINY_VOCAB = (
    "<eos> = Alpha Beta The cat sat on the mat . dog <unk> History A "
    "and a Gamma of is 1 @,@ 000").split()
# valid: " \n", " = Beta = \n", " \n", " The cat and the dog sat . \n",
# " A mat is on the cat . \n", " \n".
WIKITEXT2_TINY_VALID_IDS = [0, 1, 3, 1, 0, 0, 4, 5, 15, 8, 11, 6, 10, 0,
                            14, 9, 19, 7, 8, 5, 10, 0, 0]
# test: "zebra" and "mats" are not in train and become <unk> (12).
WIKITEXT2_TINY_TEST_IDS = [0, 1, 2, 1, 0, 0, 4, 12, 6, 7, 20, 21, 22, 12, 10,
                           0, 0]


def wikitext2_data_config(data_dir, manual_dir):
  """`lm_config().data` building WikiText-2 from `manual_dir` into
  `data_dir`."""
  c = defaults.lm_config().data
  c.data_dir, c.manual_dir = str(data_dir), str(manual_dir)
  return c


class BuiltWikitext2Tiny:
  """Mixin for a TestCase class: `setUpClass` builds wikitext2_tiny into a
  temporary data_dir (`cls._tmp`) and reads its splits (`cls.data`)."""

  @classmethod
  def setUpClass(cls):
    super().setUpClass()
    from qkspec.data import pipeline  # pylint: disable=g-import-not-at-top
    cls._tmp = tempfile.mkdtemp()
    cls.data = pipeline.load_splits(
        wikitext2_data_config(cls._tmp, WIKITEXT2_TINY),
        verify_checksums=False)

  @classmethod
  def tearDownClass(cls):
    shutil.rmtree(cls._tmp, ignore_errors=True)
    super().tearDownClass()
