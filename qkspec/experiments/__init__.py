"""The paper's experiments: one module per figure family, each with
`run(config, workdir)`, which writes figures and tables into `workdir`.

`configs/<id>.py` sets `config.experiment = "<id>"`; `EXPERIMENTS` lists
them. `outputs`, `inputs`, `chunked`, `measures` and `dong_measure` are the
helpers they share. Training runs (Figs. 6-12) are drawn by
`qkspec.plots` and judged by `qkspec.report`.
"""

EXPERIMENTS = ("dong_trained", "entropy_bound", "entropy_check",
               "for_flax_example", "rank_collapse", "simulate_grid",
               "simulate_rho", "spectrum_collapse", "theory_rho")
