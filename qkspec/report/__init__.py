"""REPRODUCTION.md from training runs (paper Sec. 7, Figs. 6-12).

* `run_cells`: the runs read back and grouped into figure x reading cells;
* `stats`, `floors`, `verdicts`, `pooled`, `claims`, `stripes`,
  `replicates`, `locater_minimum`: how each claim is judged, one cell and
  pooled over cells;
* `commands`: the launch commands as today's code runs them; `backlog`:
  what is still to run, in priority order;
* `answer`, `rules`, `sections`, `figures`: the first screen, the rules,
  the other sections and the figures;
* `writer`: `write_report`, the report, its summary files and figures.

Imports no experiment; `launch/report.py` is its command.
"""
