r"""Writes REPRODUCTION.md from training run directories (Figs. 6-12).

  python launch/report.py --runs /tmp/exp_runs/locater_wt2,/tmp/exp_runs/locater_wt2_fairseq \
      --out REPRODUCTION.md

Tables (mean +- std over seeds per kappa2), verdicts on the paper's claims
B-D, the commands and steps of every run; summary.csv, summary.json and the
figures go to --figures_dir. Runs of one figure and reading are merged, so
seeds trained as separate runs (`seed=S` configs, e.g. fig6, fig6_seed1)
count together. --replicates names runs that repeat one of --runs (same
config and seed, e.g. a run trained again on another machine): their
difference is the floor under one-seed verdicts
(qkspec/experiments/replicates.py). See qkspec/experiments/report.py.
"""
import sys

from absl import app
from absl import flags
from absl import logging

from qkspec.experiments import report

_RUNS = flags.DEFINE_list("runs", None, "launch/train.py workdirs, "
                          "comma-separated.")
_REPLICATES = flags.DEFINE_list(
    "replicates", [], "Workdirs that repeat a run of --runs (same config "
    "and seed): the same-seed rerun spread, the floor under one-seed "
    "verdicts.")
_OUT = flags.DEFINE_string("out", "REPRODUCTION.md", "The markdown report.")
_FIGURES_DIR = flags.DEFINE_string(
    "figures_dir", None, "Summary CSV/JSON and figures; default: "
    "reproduction/ next to --out.")
flags.mark_flags_as_required(["runs"])


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  command = " ".join(["python launch/report.py"] + sys.argv[1:])
  for path in report.write_report(_RUNS.value, _OUT.value,
                                  _FIGURES_DIR.value, command=command,
                                  replicate_dirs=_REPLICATES.value):
    logging.info("wrote %s", path)


if __name__ == "__main__":
  app.run(main)
