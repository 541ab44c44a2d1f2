"""The report's evidence: everything it prints, derived once from the records
(paper Sec. 7, Figs. 6-12).

`writer.write_report` reads the runs (`run_cells`), judges them -- the
commands as today's code runs them (`commands`), the noises the records
measure (`floors`), each claim's typed verdicts (`verdicts`), their
independent units and families (`pooled`), Fig. 7's stripes (`stripes`),
LocATER's own minimum (`locater_minimum`), the backlog (`backlog`) -- and
builds one frozen `Evidence` of them, as `training.sweep.make_plan` builds
the `Plan` the trainer reads. The sections (`sections`) read it and derive
nothing again.
"""
import dataclasses
from typing import Mapping

from qkspec.report import backlog as backlog_lib
from qkspec.report import floors
from qkspec.report import locater_minimum
from qkspec.report import pooled as pooled_lib
from qkspec.report import run_cells
from qkspec.report import stripes as stripes_lib
from qkspec.report import verdicts as verdicts_lib


@dataclasses.dataclass(frozen=True)
class Evidence:
  """Everything the report prints, derived once from the records."""
  runs: tuple[run_cells.Run, ...]     # each run and reading
  commands: Mapping[str, str]         # run dir -> as today's code runs it
  cells: Mapping[tuple[str, str], run_cells.Cell]    # in figure order
  groups: tuple[run_cells.Group, ...]   # every cell's, in figure order
  seed_refs: Mapping[tuple, floors.Reference]   # (reading, kind, quantity)
  reruns: Mapping[tuple, floors.Reference]      # (arch, reading, quantity)
  spread: Mapping[str, dict]          # reading -> the rerun spread
  rerun_pairs: tuple[floors.Rerun, ...]    # what each replicate compares
  verdicts: tuple[verdicts_lib.Verdict, ...]   # cell, contrast, claim
  trends: tuple[verdicts_lib.Trend, ...]       # cell, claim C or D
  pooled: tuple[pooled_lib.Pooled, ...]        # contrast, claim, reading
  stripe_results: Mapping[tuple, dict]     # member key -> its stripe test
  stripes: tuple[stripes_lib.StripeVerdict, ...]   # per Fig. 7 cell
  minimum: tuple[locater_minimum.Minimum, ...]     # per LocATER group
  backlog: backlog_lib.Backlog

  @property
  def data_seeds(self) -> tuple[int, ...]:
    """The batch-order seeds (`data.seed`) of the runs."""
    return tuple(sorted({r.data_seed for r in self.runs}))
