"""README.md's "On your own Flax model" and qkspec/for_flax/README.md,
which goes on from it: their snippets run as written, in that order."""
import contextlib
import importlib.util
import io
import re

from absl.testing import absltest
import jax
import numpy as np

import testutil

SECTION = "## On your own Flax model"
GUIDE = "qkspec/for_flax/README.md"
STACK = ["attn/0", "attn/1", "attn/2"]


def _python_blocks(text: str) -> list[str]:
  return re.findall(r"```python\n(.*?)```", text, re.S)


def snippets() -> list[str]:
  """The python blocks of README's `SECTION`, then those of `GUIDE`."""
  text = (testutil.ROOT / "README.md").read_text()
  start = text.index(SECTION)
  end = text.find("\n## ", start + len(SECTION))
  return (_python_blocks(text[start:end])
          + _python_blocks((testutil.ROOT / GUIDE).read_text()))


class ReadmeTest(absltest.TestCase):

  def check(self, i: int, ns: dict) -> None:
    """What block i of the section leaves in its namespace `ns`."""
    rows, qks = ns.get("rows", []), ns.get("qks", {})
    self.assertTrue(all(np.isfinite(r["entropy"]) for r in rows), i)
    self.assertTrue(all(np.all(np.isfinite(w)) for w in qks.values()), i)
    want = [lambda: (len(rows), len(ns["spectrum"])) == (4, 4),   # H = 4
            lambda: len(rows) == 4,
            lambda: (qks[""].shape, len(rows), len(ns["spectrum"])) == (
                (4, 16, 16), 4, 4),                          # GQA, N = 4
            lambda: sorted(qks) == STACK == sorted({r["path"] for r in rows}),
            lambda: (len(rows), sorted(qks)) == (8, ["h/0/attn", "h/1/attn"]),
            lambda: len(rows) == 4 * 18 == len(ns["spectrum"]),   # gemma
            lambda: sorted(qks) == [f"decoder/layers/self_attention/{l}"
                                    for l in range(2)],           # MaxText
            lambda: qks["attn"].shape == (4, 16, 16)][i]
    self.assertTrue(want(), f"python block {i} of README, then {GUIDE}")

  def _run_blocks(self, hugging_face: bool) -> None:
    """Runs the `snippets()` in order in one namespace, the Hugging Face
    one only if `hugging_face`, gemma's and MaxText's where installed."""
    blocks = snippets()
    self.assertLen(blocks, 8)
    namespace = {}
    for i, block in enumerate(blocks):
      needs = re.findall(r"^from (gemma|maxtext)\b", block, re.M)
      if ("transformers" in block and not hugging_face) or any(
          importlib.util.find_spec(n) is None for n in needs):
        continue
      for name in ("rows", "qks"):
        namespace.pop(name, None)
      # as a user runs them: JAX's default rank promotion, and quiet
      with jax.numpy_rank_promotion("allow"), contextlib.redirect_stdout(
          io.StringIO()):
        exec(compile(block, f"python block {i}", "exec"),  # pylint: disable=exec-used
             namespace)
      self.check(i, namespace)

  def test_for_flax_snippets_run(self):
    self._run_blocks(hugging_face=False)

  @testutil.slow("the guide's Hugging Face snippet builds and runs BERT and "
                 "GPT-2 eagerly; hf_models_test checks the same calls")
  def test_the_hugging_face_snippet_runs(self):
    if importlib.util.find_spec("transformers") is None:
      self.skipTest("transformers is not installed (the test extra has it)")
    self._run_blocks(hugging_face=True)

if __name__ == "__main__":
  absltest.main()
