"""Tests for qkspec.config.argv: the one parser of launch command words."""
from absl.testing import absltest

from qkspec.config import argv


class ArgvTest(absltest.TestCase):

  def test_flags_values_and_positional_words(self):
    words = ["--config", "f.py:smoke", "-config.x=1", "--verbose_errors",
             "--workdir", "w", "extra", "--noconfig.multihost", "--",
             "--not_a_flag"]
    found, rest = argv.parse(words, booleans=("verbose_errors",))
    self.assertEqual([(f.name, f.value) for f in found],
                     [("config", "f.py:smoke"), ("config.x", "1"),
                      ("verbose_errors", None), ("workdir", "w"),
                      ("noconfig.multihost", None)])
    self.assertEqual(found[0].words, ("--config", "f.py:smoke"))
    self.assertEqual(rest, ["extra", "--", "--not_a_flag"])
    self.assertEqual(argv.value(found, "config"), "f.py:smoke")
    self.assertIsNone(argv.value(found, "out"))
    self.assertEqual(argv.overrides(found), [("x", "1"),
                                             ("multihost", "False")])

  def test_a_bare_flag_before_another_takes_no_value(self):
    found, rest = argv.parse(["--print_config", "--workdir=w"])
    self.assertEqual([(f.name, f.value) for f in found],
                     [("print_config", None), ("workdir", "w")])
    self.assertEqual(rest, [])

  def test_the_last_boolean_wins(self):
    for words, want in ((["--verbose_errors"], True),
                        (["--verbose_errors=false"], False),
                        (["--verbose_errors", "--noverbose_errors"], False),
                        (["--noverbose_errors", "--verbose_errors=1"], True),
                        ([], False)):
      found, _ = argv.parse(words, booleans=("verbose_errors",))
      self.assertEqual(argv.boolean(found, "verbose_errors"), want, words)

  def test_without_drops_the_named_flags_and_their_values(self):
    words = ["--runs", "a,b", "--out", "x.md", "--replicates=c",
             "--records", "--runs=d"]
    self.assertEqual(argv.without(words, ("runs", "replicates"),
                                  booleans=("records",)),
                     ["--out", "x.md", "--records"])
    self.assertEqual(argv.without(words, ()), words)


if __name__ == "__main__":
  absltest.main()
