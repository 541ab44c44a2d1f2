"""Tests for bench/xla_flags_ab.py (the XLA_FLAGS A/B's bookkeeping)."""
import os
import subprocess
import sys
import tempfile
from unittest import mock

from absl.testing import absltest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import xla_flags_ab

# Lines as gpu_paper.py's rate stage logs them.
OUT = """INFO:absl:Reusing dataset wikitext2
[  37.2s] rate fig12 (L=6,d=128, scan_bf16_pallas_fa3dw_fused): compile 12.3 s, 229.4 steps/s; loss 7.50941; XLA_FLAGS (none)
[  40.0s] rate fig10: failed: XlaRuntimeError: boom
[  52.9s] rate fig8 (L=1,d=32, scan_bf16_pallas_fa3dw_fused): compile 3.1 s, 1201.5 steps/s; loss nan; XLA_FLAGS --x=1
"""


class XlaFlagsABTest(absltest.TestCase):

  def test_order_alternates_so_drift_falls_on_every_setting(self):
    self.assertEqual(xla_flags_ab.order(["a", "b", "c"], 3),
                     ["a", "b", "c", "c", "b", "a", "a", "b", "c"])

  def test_a_setting_with_a_path_of_its_own_trains_on_it(self):
    rest = ["--figs", "12", "--path", "shared"]
    paths = {"sub": "scan_bf16_pallas_fa3dw_sublayer"}
    self.assertEqual(xla_flags_ab.command("default", rest, paths)[2:],
                     ["--stages", "rate", *rest])
    sub = xla_flags_ab.command("sub", rest, paths)
    self.assertEqual(sub[2:], ["--stages", "rate", *rest, "--path",
                               "scan_bf16_pallas_fa3dw_sublayer"])
    self.assertTrue(sub[1].endswith("gpu_paper.py"))
    # each setting's rates kept in a workdir of its own
    self.assertEqual(xla_flags_ab.command("sub", rest, paths, "/ab")[-4:],
                     ["--path", "scan_bf16_pallas_fa3dw_sublayer",
                      "--workdir", "/ab/sub"])
    self.assertEqual(xla_flags_ab.command("default", rest, paths, "/ab")[2:],
                     ["--stages", "rate", *rest, "--workdir", "/ab/default"])

  def test_parse_reads_rate_and_loss_and_skips_failures(self):
    got = xla_flags_ab.parse(OUT)
    self.assertEqual(sorted(got), [8, 12])
    self.assertEqual(got[12], (229.4, 7.50941))
    self.assertTrue(got[8][1] != got[8][1])          # nan kept as nan

  def test_summary_medians_ratios_and_a_loss_that_disagrees(self):
    runs = [("default", {12: (200.0, 7.5)}), ("graphs", {12: (300.0, 7.5)}),
            ("graphs", {12: (320.0, 7.51)}), ("default", {12: (210.0, 7.5)}),
            ("off", {12: (100.0, 9.0)})]
    lines = xla_flags_ab.summarize(runs, ["default", "graphs", "off"])
    self.assertEqual(lines, [
        "fig12  default:    205.0 steps/s (median of 2: 200.0, 210.0), "
        "x1.000 of default",
        "fig12   graphs:    310.0 steps/s (median of 2: 300.0, 320.0), "
        "x1.512 of default",
        "fig12      off:    100.0 steps/s (median of 1: 100.0), x0.488 of "
        "default; its loss DISAGREES (20.0% off default's)"])

  def test_a_nan_loss_disagrees_wherever_it_falls(self):
    for losses in ((7.5, float("nan")), (float("nan"), 7.5)):
      runs = [("default", {12: (200.0, 7.5)})] + [
          ("graphs", {12: (300.0, loss)}) for loss in losses]
      self.assertIn("DISAGREES",
                    xla_flags_ab.summarize(runs, ["default", "graphs"])[1])
      self.assertEqual(xla_flags_ab.winner(runs, ["default", "graphs"], 12),
                       "default")

  def test_summary_says_when_a_setting_never_ran(self):
    lines = xla_flags_ab.summarize([("default", {6: (100.0, 7.0)}),
                                    ("graphs", {})], ["default", "graphs"])
    self.assertEqual(lines[1], "fig6   graphs: no run finished")
    lines = xla_flags_ab.summarize([("graphs", {6: (100.0, 7.0)})],
                                   ["default", "graphs"])
    self.assertEqual(lines, ["fig6  default: no run finished",
                             "fig6   graphs:    100.0 steps/s (median of 1: "
                             "100.0)"])

  def test_winner_must_beat_the_first_by_the_margin_with_its_loss(self):
    runs = [("default", {12: (200.0, 7.5)}), ("graphs", {12: (209.0, 7.5)}),
            ("cublas", {12: (260.0, 7.5)}), ("off", {12: (400.0, 9.0)})]
    settings = ["default", "graphs", "cublas", "off"]
    # off is fastest but its loss disagrees; cublas beats default by 30%
    self.assertEqual(xla_flags_ab.winner(runs, settings, 12), "cublas")
    # graphs (4.5% faster) is within the margin: default stays
    self.assertEqual(xla_flags_ab.winner(runs, settings[:2], 12), "default")
    self.assertEqual(xla_flags_ab.winner(runs, settings[:2], 12, 0.04),
                     "graphs")
    # nothing to compare with: the first setting
    self.assertEqual(xla_flags_ab.winner(runs[1:], settings, 12), "default")
    self.assertEqual(xla_flags_ab.winner(runs, settings, 10), "default")

  def test_the_winner_is_written_with_its_path_and_its_rates_workdir(self):
    """main's files for the next call: the winner's XLA_FLAGS, path and
    members curves (its rate process's --workdir under
    --setting_workdirs)."""
    rate = ("[ 1.0s] rate fig12 (L=6,d=128, p): compile 1.0 s, {} steps/s; "
            "loss 7.5; XLA_FLAGS (none)\n")
    seen = []

    def fake_run(cmd, env, **_):
      seen.append((cmd[cmd.index("--workdir") + 1], env["XLA_FLAGS"]))
      fast = "--path" in cmd[-4:]                  # the "sub" setting
      return subprocess.CompletedProcess(
          cmd, 0, rate.format(300.0 if fast else 200.0), "")

    with tempfile.TemporaryDirectory() as tmp:
      out = os.path.join(tmp, "winner")
      argv = ["xla_flags_ab.py", "--settings", "default,sub", "--rounds",
              "1", "--setting", "sub=", "--path_of", "sub=other_path",
              "--winner_out", out, "--winner_path_out", out + ".path",
              "--setting_workdirs", os.path.join(tmp, "ab"),
              "--winner_curves_out", out + ".curves", "--", "--figs", "12"]
      with mock.patch.object(sys, "argv", argv), \
           mock.patch.object(subprocess, "run", fake_run), \
           mock.patch("builtins.print"), \
           self.assertRaises(SystemExit) as exit_:
        xla_flags_ab.main()
      self.assertEqual(exit_.exception.code, 0)
      self.assertEqual([w for w, _ in seen], [os.path.join(tmp, "ab", n)
                                              for n in ("default", "sub")])
      read = lambda name: open(name).read()  # noqa: E731
      self.assertEqual(read(out), "")
      self.assertEqual(read(out + ".path"), "other_path")
      self.assertEqual(read(out + ".curves"), os.path.join(
          tmp, "ab", "sub", "members_curves.json"))
    # the file gpu_paper.py's rate stage writes
    import gpu_paper  # pylint: disable=g-import-not-at-top
    self.assertEqual(xla_flags_ab.CURVES_FILE, gpu_paper.CURVES_FILE)


if __name__ == "__main__":
  absltest.main()
