"""Tests for qkspec.report.commands: commands that run under today's code."""
import re

from absl.testing import absltest

from qkspec import cli
from qkspec.report import commands
from qkspec.report import sections
import testutil

_OLD = ("python launch/train.py --config configs/depth_width.py:L=6,d=32,"
        "both_readings --config.model.attention_impl=pallas "
        "--config.model.fused_qkv=True --config.model.loss_impl=pallas "
        "--config.model.loss_pallas=64x128x4x2x4/fa3/fa3x2 "
        "--config.compute_dtype=bfloat16 --workdir runs/fig10_both")


def _documented(name: str) -> list[str]:
  """The launch commands with a --config in a markdown file of the
  repository: in backticks, or lines of a code block (joined where they
  end in a backslash, comments dropped)."""
  text = (testutil.ROOT / name).read_text()
  found = re.findall(r"`(python launch/[^`]*--config[^`]*)`", text)
  for block in re.findall(r"```bash\n(.*?)```", text, re.S):
    for line in block.replace("\\\n", " ").splitlines():
      line = line.split("#")[0].strip()
      if line.startswith("python launch/") and "--config" in line:
        found.append(line)
  return found


class CommandsTest(absltest.TestCase):

  def test_parse(self):
    c = commands.parse(_OLD)
    self.assertEqual((c["launcher"], c["config"], c["arg"], c["workdir"]),
                     ("launch/train.py", "configs/depth_width.py",
                      "L=6,d=32,both_readings", "runs/fig10_both"))
    self.assertEqual(c["overrides"][-1], ("compute_dtype", "bfloat16"))
    with self.assertRaisesRegex(ValueError, "unknown flag '--bogus'"):
      commands.parse("python launch/train.py --bogus --workdir w")

  def test_today_replaces_the_retired_kernel_flags(self):
    self.assertEqual(commands.retired(_OLD), [
        ("model.attention_impl", "pallas"), ("model.fused_qkv", "True"),
        ("model.loss_impl", "pallas"),
        ("model.loss_pallas", "64x128x4x2x4/fa3/fa3x2")])
    self.assertEqual(
        commands.today(_OLD),
        "python launch/train.py --config configs/depth_width.py:L=6,d=32,"
        "both_readings --config.model.kernels=pallas "
        "--config.compute_dtype=bfloat16 --workdir runs/fig10_both")
    self.assertEqual(commands.check(commands.today(_OLD)).model.kernels,
                     "pallas")
    # a retired flag that chose no Pallas kernel is only dropped
    chunk = ("python launch/train.py --config configs/locater_wt2.py "
             "--config.model.loss_chunk=4096 --workdir w")
    self.assertEqual(commands.today(chunk), "python launch/train.py "
                     "--config configs/locater_wt2.py --workdir w")
    self.assertEqual(commands.today(commands.today(_OLD)),
                     commands.today(_OLD))

  def test_check_refuses_what_todays_code_refuses(self):
    with self.assertRaisesRegex(ValueError, "unknown config key "
                                "'model.attention_impl'"):
      commands.check(_OLD)
    with self.assertRaisesRegex(ValueError, "model.kernels"):
      commands.check("python launch/train.py --config configs/locater_wt2.py"
                     " --config.model.kernels=cuda --workdir w")
    with self.assertRaisesRegex(ValueError, "unknown config argument"):
      commands.check("python launch/train.py --config "
                     "configs/locater_wt2.py:bogus --workdir w")
    c = commands.check("python launch/train.py --config configs/locater_wt2.py"
                       ':fairseq --config.sweep.kappa2="(0.5, 1.0)" '
                       "--config.num_steps=7 --config.opt.lr=1e-3 "
                       "--config.data.data_dir=/tmp/x --workdir w")
    self.assertEqual((c.sweep.kappa2, c.num_steps, c.opt.lr,
                      c.data.data_dir, c.locater.penalty_added_to),
                     ((0.5, 1.0), 7, 1e-3, "/tmp/x", "summed_loss"))


class RunsSectionTest(absltest.TestCase):

  def test_today_s_command_then_the_flags_as_trained_at_their_commit(self):
    run = dict(run_dir="runs/fig10_both", path="/nonexistent", label="Fig. 10",
               reading="mean_loss", both_readings=True, final_step=50_000,
               num_steps=50_000, command=commands.as_run_today(_OLD),
               trained_command=_OLD, commit="0efd96a")
    [line] = sections.runs_section([run])[4:]
    self.assertIn(f"`{commands.today(_OLD)}`; trained at commit 0efd96a (the "
                  "first to report it) with `--config.model.attention_impl="
                  "pallas --config.model.fused_qkv=True --config.model."
                  "loss_impl=pallas --config.model.loss_pallas=64x128x4x2x4/"
                  "fa3/fa3x2`", line)
    today = commands.today(_OLD)
    [line] = sections.runs_section([dict(run, command=today,
                                         trained_command=today)])[4:]
    self.assertNotIn("trained at", line)
    # a command whose config cannot be loaded is printed as it is
    odd = "python launch/train.py --config configs/nope.py --workdir w"
    self.assertEqual(commands.as_run_today(odd), odd)


class DocumentedCommandsTest(absltest.TestCase):

  def test_every_command_in_the_report_and_readme_runs_today(self):
    """Each command loads its config file and argument, takes every
    --config.x=y and passes the schema, as launch/ would before it trains
    (a ValueError, or qkspec.config's ValueError subclass, fails it)."""
    found = {name: _documented(name) for name in ("REPRODUCTION.md",
                                                  "README.md")}
    self.assertGreater(len(found["REPRODUCTION.md"]), 20)
    self.assertNotEmpty(found["README.md"])
    for name, lines in found.items():
      for command in lines:
        try:
          cli.check_config(commands.check(command))
        except ValueError as e:
          self.fail(f"{name}: {command}: {e}")

  def test_readme_findings_are_numbers_the_report_prints(self):
    readme = (testutil.ROOT / "README.md").read_text()
    findings = readme[readme.index("## What it finds"):]
    findings = findings[:findings.index("\n* **", 20)]
    report = (testutil.ROOT / "REPRODUCTION.md").read_text()
    numbers = re.findall(r"[-+]?\d[\d,.]*\d%?|\d", findings)
    self.assertGreater(len(numbers), 10)
    for number in numbers:
      self.assertIn(number, report, f"README's {number} is not in the report")


if __name__ == "__main__":
  absltest.main()
