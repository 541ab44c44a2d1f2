"""Paper experiments: one module per figure family, each with `run`.

`run(config, workdir)` writes figures and tables into `workdir`;
`configs/<id>.py` sets `config.experiment = "<id>"` (`cli.run_experiment`).
`training_plots` and `report` draw training runs (Figs. 6-12), `demo` is
the main job; `outputs`, `inputs`, `chunked` and `measures` are shared.
"""
