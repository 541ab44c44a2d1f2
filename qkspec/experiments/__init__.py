"""Paper experiments: one module per figure family, each with `run`.

`run(config, workdir)` writes the figures and tables into `workdir`;
`configs/<id>.py` sets `config.experiment = "<id>"`, run by
`qkspec.experiments.<id>.run` (`cli.run_experiment`). Experiments:
`theory_rho` (Figs. 2-3, Lemma 2), `entropy_bound` (Fig. 4), `simulate_rho`
(Fig. 5), `simulate_grid`, `rank_collapse`, `spectrum_collapse`,
`entropy_check`, `dong_trained`, `for_flax_example` (`qkspec.for_flax` on a
plain Flax transformer). `training_plots` and `report` draw training
runs (Figs. 6-12); `demo` is the main job. Shared: `outputs`, `inputs`,
`chunked`, `measures`.
"""
