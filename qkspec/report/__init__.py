"""REPRODUCTION.md from training runs (paper Sec. 7, Figs. 6-12).

The report runs in four phases, each module in one:

* read: `run_cells` (the runs and their cells), `commands` (the launch
  commands as trained and as today's code runs them);
* judge: `stats`, `floors`, `verdicts`, `pooled`, `stripes`,
  `locater_minimum` and `backlog`, gathered once into one typed
  `evidence.Evidence`;
* render: `answer` (the first screen), `rules`, `figures` and `sections`
  read the evidence;
* write: `writer.write_report`, the report, its summary files and figures.

Imports no experiment; `launch/report.py` is its command.
"""
