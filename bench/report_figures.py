r"""The report's wall time with its figures drawn here or side by side.

  python bench/report_figures.py --runs RUN_DIR,... [--rounds 3]

`qkspec.experiments.report.write_report` over the given runs (e.g. the
section's six, bench/gpu_section.sh), its figures drawn one after another
in this process (`figure_writer.Figures` with one worker: the reference)
or by one process per core (the default), alternating, each into a fresh
directory. Prints each round's seconds, the medians and their ratio, from
one process (the report's imports are paid once, before either is timed).
"""
import argparse
import statistics
import tempfile
import time
from unittest import mock

from qkspec.experiments import figure_writer
from qkspec.experiments import report


def timed(runs: list[str], workers: int) -> float:
  """Seconds of one `write_report` of `runs` with `workers` drawing."""
  with tempfile.TemporaryDirectory() as tmp, mock.patch.object(
      figure_writer, "cores", lambda: workers):
    t = time.perf_counter()
    report.write_report(runs, f"{tmp}/REPRODUCTION.md")
    return time.perf_counter() - t


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--runs", required=True, help="run directories, a,b,...")
  p.add_argument("--rounds", type=int, default=3)
  flags = p.parse_args()
  runs = flags.runs.split(",")
  cores = figure_writer.cores()
  timed(runs, 1)                                # warm: imports, caches
  got = {1: [], cores: []}
  for r in range(flags.rounds):
    for workers in ((1, cores) if r % 2 == 0 else (cores, 1)):
      got[workers].append(timed(runs, workers))
      print(f"round {r}: {workers} worker(s) {got[workers][-1]:.2f} s",
            flush=True)
  here, side = (statistics.median(got[w]) for w in (1, cores))
  print(f"report of {len(runs)} runs: figures drawn here {here:.2f} s, by "
        f"{cores} processes {side:.2f} s (median of {flags.rounds}): "
        f"x{here / side:.2f}")


if __name__ == "__main__":
  main()
