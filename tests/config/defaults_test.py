"""Tests for qkspec.config.defaults: the default data config's fields."""
from absl.testing import absltest

from qkspec.config import defaults


class DataConfigTest(absltest.TestCase):

  def test_default_config_fields(self):
    c = defaults.lm_config().data
    self.assertEqual((c.name, c.seq_len, c.batch_size, c.seed),
                     ("wikitext2", 64, 64, 0))
    self.assertEqual((c.data_dir, c.manual_dir), ("", ""))


if __name__ == "__main__":
  absltest.main()
