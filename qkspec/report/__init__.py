"""REPRODUCTION.md from training runs (paper Sec. 7, Figs. 6-12).

* `run_cells`: the runs read back and grouped into figure x reading cells;
* `stats`, `verdicts`, `claims`, `stripes`, `replicates`,
  `locater_minimum`: how each claim is judged;
* `answer`: the first screen and the verdict tables in words;
* `writer`: `write_report`, the report, its summary files and figures.

Imports no experiment; `launch/report.py` is its command.
"""
