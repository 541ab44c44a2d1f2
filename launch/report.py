r"""Writes REPRODUCTION.md from training run directories (Figs. 6-12).

  python launch/report.py \
      --runs /tmp/exp_runs/locater_wt2,/tmp/exp_runs/locater_wt2_fairseq \
      --out REPRODUCTION.md
  python launch/report.py --out REPRODUCTION.md     # from the records alone

The answer first (one line per claim, then the verdict table), then every
verdict with its paired t-test or one-seed floor, kappa2 as a curve, and
the commands and steps of every run; summary.csv, summary.json and
the figures go to --figures_dir. Each run of --runs is first recorded in
--records_dir (its config, members, run_info and the few metrics the
report reads: qkspec/records/store.py) and the report covers
every record there, so runs on machines that are gone still count and the
command without --runs regenerates it. A run recorded again replaces its
record; another run whose directory has the same basename is refused.
Runs of one figure and reading are merged (seeds trained as separate runs
count together). --replicates: runs that repeat one of the runs (same config
and seed): what GPU nondeterminism alone moves. --norecords reports on --runs
alone. Your own runs want their own --out (e.g. /tmp/exp_runs/REPRODUCTION.md):
with the default they join the repository's records and report.
"""
import sys

from absl import flags
from absl import logging

from qkspec import cli
from qkspec.config import ConfigError
from qkspec.config import argv
from qkspec.records import rundir
from qkspec.report import writer

_RUNS = flags.DEFINE_list("runs", [], "launch/train.py workdirs, "
                          "comma-separated, recorded before the report.")
_REPLICATES = flags.DEFINE_list(
    "replicates", [], "Workdirs that repeat a run (same config and seed): "
    "the same-seed rerun spread (GPU nondeterminism).")
_OUT = flags.DEFINE_string("out", "REPRODUCTION.md", "The markdown report.")
_FIGURES_DIR = flags.DEFINE_string(
    "figures_dir", None, "Summary CSV/JSON and figures; default: "
    "reproduction/ next to --out.")
_RECORDS = flags.DEFINE_bool(
    "records", True, "Record --runs and --replicates in --records_dir and "
    "report on every record there; --norecords: on --runs alone.")
_RECORDS_DIR = flags.DEFINE_string(
    "records_dir", None, "The run records; default: records/ in "
    "--figures_dir.")


def main():
  for run_dir in _RUNS.value + _REPLICATES.value:
    rundir.check(run_dir)
  records_dir = None
  words = sys.argv[1:]
  if _RECORDS.value:
    records_dir = _RECORDS_DIR.value or writer.default_records_dir(
        _OUT.value, _FIGURES_DIR.value)
    words = argv.without(words, ("runs", "replicates"),   # from the records
                         booleans=("records",))
  elif not _RUNS.value:
    raise ConfigError("--norecords reports on --runs alone: give --runs.")
  command = " ".join(["python launch/report.py"] + words)
  for path in writer.write_report(_RUNS.value, _OUT.value,
                                  _FIGURES_DIR.value, command=command,
                                  replicate_dirs=_REPLICATES.value,
                                  records_dir=records_dir):
    logging.info("wrote %s", path)


if __name__ == "__main__":
  cli.command(main)
