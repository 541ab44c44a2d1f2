"""Tests for qkspec.report.sections: the sections after the first screen."""
from absl.testing import absltest

from qkspec.report import sections
import report_fixtures


class RunInfoTest(absltest.TestCase):

  def test_devices_and_wall_time_of_every_invocation(self):
    lines = [{"wall_s": wall, "device_kind": "H100", "device_count": 1,
              "compute_dtype": "bfloat16"} for wall in (60.0, 30.0)]
    run = report_fixtures.run("r", [], info=lines)
    self.assertEqual(sections.run_info(run), "1 x H100; compute bfloat16; "
                     "wall 1.5 min in 2 invocations (setup, compilation and "
                     "evaluation included)")
    self.assertEqual((run.devices, run.wall_minutes), (("H100",), 1.5))
    lines = [{"wall_s": steps + 10, "device_kind": "H100",
              "device_count": 1, "phases_s": {"setup": 4.0, "compile": 6.0,
                                              "steps": steps}}
             for steps in (50.0, 20.0)]
    self.assertEqual(sections.run_info(report_fixtures.run("r", [],
                                                            info=lines)),
                     "1 x H100; compute float32; wall 1.5 min in 2 "
                     "invocations (setup 8 s, compile 12 s, steps 70 s)")
    self.assertEqual(sections.run_info(report_fixtures.run("r", [])), "")


if __name__ == "__main__":
  absltest.main()
