"""Tests for qkspec.report.commands: commands that run under today's code,
and the commands that rebuild a run's config."""
import dataclasses
import json
import re

from absl.testing import absltest

from configs import depth_width
from configs import locater_wt2
from configs import rho_training
from qkspec.config import defaults
from qkspec.config import schema
from qkspec.experiments import runner
from qkspec.report import commands
from qkspec.report import run_cells
from qkspec.report import sections
from qkspec.training import sweep
import report_fixtures
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
    # every form absl takes: two words, one dash, a two-word --config
    spaced = ("python launch/train.py --config configs/locater_wt2.py "
              "--config.model.loss_chunk 4096 -config.model.fused_qkv=True "
              "--workdir w")
    self.assertEqual(commands.today(spaced), "python launch/train.py "
                     "--config configs/locater_wt2.py "
                     "--config.model.kernels=pallas --workdir w")

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
    run = report_fixtures.run(
        "runs/fig10_both", [report_fixtures.member(100.0, 0.0)], "Fig. 10",
        record=dict(command=_OLD, commit="0efd96a"))
    today = commands.by_run([run])
    self.assertEqual(today, {"runs/fig10_both": commands.today(_OLD)})
    ev = report_fixtures.evidence_of([run])
    [line] = sections.runs_section(dataclasses.replace(ev, commands=today))[4:]
    self.assertIn(f"`{commands.today(_OLD)}`; trained at commit 0efd96a (the "
                  "first to report it) with `--config.model.attention_impl="
                  "pallas --config.model.fused_qkv=True --config.model."
                  "loss_impl=pallas --config.model.loss_pallas=64x128x4x2x4/"
                  "fa3/fa3x2`", line)
    same = dataclasses.replace(ev, commands={run.run_dir: _OLD})
    self.assertNotIn("trained at", sections.runs_section(same)[4])
    # a command whose config cannot be loaded is printed as it is
    odd = "python launch/train.py --config configs/nope.py --workdir w"
    self.assertEqual(commands.as_run_today(odd), odd)

  def test_a_run_without_a_record_is_rebuilt_from_its_config(self):
    config = json.loads(locater_wt2.get_config("fairseq").to_json())
    run = report_fixtures.run("w", [], record={})
    run = dataclasses.replace(run, config=config)
    self.assertEqual(commands.by_run([run, run]), {
        "w": _rebuilt(config, "w")})
    self.assertIn("configs/locater_wt2.py:fairseq --workdir w",
                  _rebuilt(config, "w"))


def _rebuilt(config, run_dir):
  return commands.config_command(config, run_dir,
                                 *run_cells.figure_of(config))


class SeedArgumentTest(absltest.TestCase):

  def test_one_seed_alone_and_the_command_rebuilds(self):
    for module, arg in ((locater_wt2, "seed=2,fairseq"),
                        (depth_width, "L=3,d=32,seed=2,fairseq"),
                        (rho_training, "seed=2,fairseq")):
      c = module.get_config(arg)
      schema.validate(c)
      self.assertEqual({m["seed"] for m in sweep.members(c)}, {2}, arg)
      command = _rebuilt(json.loads(c.to_json()), "/tmp/w")
      self.assertIn(f":{arg} --workdir", command)       # no overrides
      with self.assertRaisesRegex(ValueError, "give one"):
        module.get_config(arg.replace("seed=2", "seed=2,seeds=3"))
    self.assertEqual(locater_wt2.get_config().seed, 0)


class NoneArgumentTest(absltest.TestCase):

  def test_the_no_locater_member_alone_and_the_command_rebuilds(self):
    for module, arg, fig in ((depth_width, "L=3,d=32,none,seed=1", "9"),
                             (locater_wt2, "none,fairseq", "6")):
      c = module.get_config(arg)
      schema.validate(c)
      [member] = sweep.members(c)
      self.assertEqual((member["kappa1"], member["kappa2"]), (0.0, 0.0))
      config = json.loads(c.to_json())
      self.assertEqual(run_cells.figure_of(config), (fig, False))
      self.assertIn(f":{arg.replace('none,seed=1', 'seed=1,none')} "
                    "--workdir", _rebuilt(config, "/tmp/w"))
    two = depth_width.get_config("L=3,d=32,none,seeds=2")
    self.assertEqual([(m["seed"], m["kappa1"]) for m in sweep.members(two)],
                     [(0, 0.0), (1, 0.0)])
    with self.assertRaisesRegex(ValueError, "give one"):
      depth_width.get_config("L=3,d=32,none,contrast")

  def test_a_swept_tuple_is_passed_quoted_whatever_its_length(self):
    config = json.loads(locater_wt2.get_config().to_json())
    for target, flag in (([0.5], '"(0.5,)"'), ([0.5, 1.0], '"(0.5, 1.0)"')):
      config["sweep"]["target"] = target
      self.assertIn(f" --config.sweep.target={flag} ",
                    _rebuilt(config, "/tmp/w"))


class Kappa2ArgumentTest(absltest.TestCase):

  def test_other_kappa2_train_and_the_command_rebuilds(self):
    for module, arg in ((locater_wt2, "kappa2=10,100,1000,seeds=3,"
                         "both_readings"),
                        (depth_width, "L=6,d=32,kappa2=0,1,seed=1,contrast")):
      c = module.get_config(arg)
      schema.validate(c)
      kappa2 = {m["kappa2"] for m in sweep.members(c) if m["kappa1"] > 0}
      self.assertEqual(kappa2, {10.0, 100.0, 1000.0} if "seeds" in arg
                       else {0.0, 1.0})
      command = _rebuilt(json.loads(c.to_json()), "/tmp/w")
      self.assertIn(f":{arg} --workdir", command)        # no overrides


class ContrastArgumentTest(absltest.TestCase):

  def test_one_no_locater_member_per_seed_and_the_command_rebuilds(self):
    c = depth_width.get_config("L=3,d=32,seeds=2,contrast")
    schema.validate(c)
    members = sweep.members(c)
    self.assertLen(members, 12)
    for seed in (0, 1):
      pairs = [(m["kappa1"], m["kappa2"]) for m in members
               if m["seed"] == seed]
      self.assertEqual(pairs, [(100.0, k) for k in defaults.KAPPA2_SWEEP]
                       + [(0.0, 0.0)])
    config = json.loads(c.to_json())
    self.assertEqual(run_cells.figure_of(config), ("9", False))
    command = _rebuilt(config, "/tmp/w")
    self.assertIn("--config configs/depth_width.py:L=3,d=32,seeds=2,"
                  "contrast --workdir", command)       # no overrides
    one = json.loads(depth_width.get_config("L=1,d=32,contrast").to_json())
    self.assertLen(one["sweep"]["kappa1"], 6)
    self.assertIn("configs/depth_width.py:L=1,d=32,contrast --workdir",
                  _rebuilt(one, "/tmp/w"))


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
          runner.check(commands.check(command))
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
