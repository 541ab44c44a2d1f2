"""bench/attention.py's rehearsal: the attention implementations it times
agree with the float32 reference (the cuDNN line on a GPU only)."""
import contextlib
import io
import re
import sys

from absl.testing import absltest

import testutil

sys.path.insert(0, str(testutil.ROOT / "bench"))
import attention  # pylint: disable=g-import-not-at-top,wrong-import-position


class RehearsalTest(absltest.TestCase):

  def test_each_implementation_is_timed_and_agrees(self):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      attention.main(["--rehearse", "--widths", "8", "--repeats", "1"])
    lines = out.getvalue().splitlines()
    self.assertTrue(lines[0].startswith("device: "))
    timed = {re.match(r"D=\s*\d+ (\w+)", x).group(1): x for x in lines[1:]}
    self.assertContainsSubset({"pallas", "xla"}, timed)
    for line in timed.values():
      err = float(re.search(r"float32\| (\S+)", line).group(1))
      self.assertLess(err, 1e-5, line)


if __name__ == "__main__":
  absltest.main()
