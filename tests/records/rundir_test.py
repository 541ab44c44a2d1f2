"""Tests for qkspec.records.rundir: a run directory read back, and the
member names that say only what varies."""
import json

from absl.testing import absltest
import numpy as np

from qkspec.records import rundir
import testutil


class RundirTest(absltest.TestCase):

  def test_load_members_reads_each_members_metrics_and_maps(self):
    wd = testutil.workdir(self)
    members = [dict(dir="a", kappa2=0.0), dict(dir="b", kappa2=1.0)]
    wd.mkdir(parents=True)
    (wd / "members.json").write_text(json.dumps(members))
    for i, m in enumerate(members):
      (wd / m["dir"]).mkdir()
      (wd / m["dir"] / "metrics.jsonl").write_text("".join(
          json.dumps({"step": s, "valid/ppl": 10.0 * (i + 1) + s}) + "\n"
          for s in (0, 5)))
    loaded = rundir.load_members(str(wd))
    self.assertEqual([m["kappa2"] for m in loaded], [0.0, 1.0])
    self.assertEqual(rundir.final_value(loaded[1]["metrics"], "valid/ppl"),
                     25.0)
    np.testing.assert_array_equal(loaded[0]["metrics"]["valid/ppl"][0],
                                  [0, 5])
    self.assertTrue(np.isnan(rundir.final_value(loaded[0]["metrics"],
                                                "absent")))

  def test_member_names_name_only_what_varies(self):
    sweep = [dict(kappa1=1.0, kappa2=k) for k in (0.0, 1e-3)]
    self.assertEqual(rundir.member_names(sweep),
                     ["1: $\\kappa_2$=0", "2: $\\kappa_2$=0.001"])
    self.assertEqual(rundir.varying_fields(sweep), ["kappa2"])
    theory = [dict(kappa1=0, kappa2=0, target=1),
              dict(kappa1=100, kappa2=100, target=12)]
    self.assertEqual(rundir.member_names(theory)[1],
                     r"2: $\kappa_1$=100, $\kappa_2$=100, target=12")
    readings = [dict(kappa2=1, penalty_added_to=r)
                for r in ("mean_loss", "summed_loss")]
    self.assertEqual(rundir.member_names(readings),
                     ["1: reading=literal", "2: reading=fairseq"])


if __name__ == "__main__":
  absltest.main()
