"""bench/gpu_figures.py: its flags, each figure's config, a CPU rehearsal."""
import os
import subprocess
import sys
import tempfile

from absl.testing import absltest
from absl.testing import parameterized

import testutil

sys.path.insert(0, str(testutil.ROOT / "bench"))
# pylint: disable=g-import-not-at-top,wrong-import-position
import gpu_figures

# figure -> (layers, width, learning rate): paper Sec. 7 and App. D
PAPER = {6: (1, 128, 2.5e-5), 8: (1, 32, 1e-4), 9: (3, 32, 1e-4),
         10: (6, 32, 1e-4), 11: (3, 128, 2.5e-5), 12: (6, 128, 2.5e-5)}
# the XLA model: the Pallas kernels run only in the interpreter on a CPU
NO_KERNELS = ["--kernels", "xla"]


class FlagsTest(absltest.TestCase):

  def test_defaults_train_every_figure_on_the_kept_path(self):
    flags = gpu_figures.parse_flags([])
    self.assertEqual(flags.figs, [6, 8, 9, 10, 11, 12])
    self.assertEqual(flags.kernels, gpu_figures.KEPT["model.kernels"])
    self.assertEqual((flags.reading, flags.steps, flags.time_budget_s),
                     ("literal", 0, 0))

  def test_rehearsal_shortens_the_probe(self):
    self.assertEqual(gpu_figures.parse_flags(["--rehearse"]).probe_steps, 4)

  def test_unknown_figures_and_negative_numbers_are_usage_errors(self):
    for argv in (["--figs", "7"], ["--figs", "6,x"], ["--steps", "-1"],
                 ["--reading", "both_readings"]):
      with self.assertRaises(SystemExit, msg=argv):
        gpu_figures.parse_flags(argv)


class ConfigTest(parameterized.TestCase):

  @parameterized.parameters(*PAPER)
  def test_each_figure_is_its_papers_sweep(self, fig):
    flags = gpu_figures.parse_flags(
        NO_KERNELS + ["--tfds_dir", "/t", "--manual_dir", "/m"])
    c = gpu_figures.fig_config(fig, flags)
    layers, d, lr = PAPER[fig]
    self.assertEqual((c.model.num_layers, c.model.d_model, c.model.ffn_dim,
                      c.opt.lr), (layers, d, d, lr))
    self.assertEqual(c.num_steps, 50_000)
    self.assertEqual(c.locater.kappa1, 100.0)
    self.assertEqual(tuple(c.sweep.kappa2), (0.0, 1e-3, 1e-2, 1e-1, 1.0))
    self.assertEqual(c.locater.penalty_added_to, "mean_loss")
    self.assertEqual(c.compute_dtype, gpu_figures.KEPT["compute_dtype"])
    self.assertEqual((c.data.data_dir, c.data.manual_dir), ("/t", "/m"))
    self.assertEqual(gpu_figures.fig_workdir(fig, flags),
                     os.path.join("runs/gpu_figures", f"fig{fig}"))

  def test_the_kept_kernels(self):
    c = gpu_figures.fig_config(6, gpu_figures.parse_flags([]))
    self.assertEqual(c.model.kernels, "pallas")
    c = gpu_figures.fig_config(6, gpu_figures.parse_flags(NO_KERNELS))
    self.assertEqual(c.model.kernels, "xla")

  def test_readings_and_steps(self):
    flags = gpu_figures.parse_flags(
        NO_KERNELS + ["--reading", "fairseq", "--steps", "7"])
    c = gpu_figures.fig_config(10, flags)
    self.assertEqual((c.locater.penalty_added_to, c.num_steps),
                     ("summed_loss", 7))
    self.assertEqual(gpu_figures.fig_workdir(10, flags),
                     os.path.join("runs/gpu_figures", "fig10_fairseq"))
    both = gpu_figures.fig_config(12, gpu_figures.parse_flags(
        NO_KERNELS + ["--reading", "both"]))
    self.assertCountEqual(set(both.sweep.penalty_added_to),
                          ("mean_loss", "summed_loss"))


@testutil.slow("the script's rehearsal of Fig. 8, trained twice")
class RehearsalTest(absltest.TestCase):

  def _run(self, workdir):
    out = subprocess.run(
        [sys.executable, str(testutil.ROOT / "bench" / "gpu_figures.py"),
         "--rehearse", "--figs", "8", "--workdir", workdir] + NO_KERNELS,
        capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, "PYTHONPATH": str(testutil.ROOT)})
    self.assertEqual(out.returncode, 0, out.stderr[-3000:])
    return out.stdout.splitlines()

  def test_trains_prints_its_times_and_a_rerun_has_nothing_left(self):
    with tempfile.TemporaryDirectory() as tmp:
      lines = self._run(tmp)
      # the projection: a number, or none where the probe's steps took
      # under the loop's 0.1 s resolution
      self.assertTrue(any(l.startswith("fig 8: 4 steps from step 0, ")
                          and "-step probe" in l for l in lines), lines)
      self.assertTrue(any(l.startswith("fig 8: 4 steps in") for l in lines),
                      lines)
      self.assertRegex(lines[-2], r"^fig  8 +4 of 4 steps .* \[cpu\]$")
      self.assertRegex(lines[-1], r"^total: 1 of 1 figures .* \[cpu\]$")
      self.assertTrue(os.path.isdir(os.path.join(tmp, "fig8", "ckpt", "4")))
      self.assertFalse(os.path.exists(os.path.join(tmp, "probe", "fig8")))
      again = self._run(tmp)
      self.assertIn("fig 8: at step 4 of 4 already: nothing left to train "
                    "[cpu]", again)
      self.assertRegex(again[-1], r"^total: 1 of 1 figures .* \[cpu\]$")


if __name__ == "__main__":
  absltest.main()
