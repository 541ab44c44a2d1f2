"""Paper experiments: one module per figure family, each with `run`.

`run(config, workdir)` writes the figures and tables into `workdir`.

* `theory_rho`: Eq. (6) over (xi, eta), Figs. 2-3, the Lemma 2 table;
* `entropy_bound`: the Eq. (9) curve vs nu, Fig. 4;
* `simulate_rho`: Monte Carlo rho_i and attention entropy, Fig. 5;
* `simulate_grid`: the same on a dense (eigen_mean, eigen_std) grid;
* `rank_collapse`, `spectrum_collapse`, `entropy_check`: rank collapse
  (Dong) and entropy bounds (Zhai, Eq. 9) in random pure self-attention
  networks; `dong_trained` (with `dong_measure`): trained ones;
* `training_plots`: a training workdir's figures (Figs. 6-7 panels);
* `report` (with `report_runs`, `report_claims`, `run_records`,
  `replicates`, `locater_minimum`, `stripes`):
  REPRODUCTION.md from training runs (Figs. 6-12);
* `demo`: the main job (every figure that needs no data set);
* shared by the above: `outputs` (workdir, config checks, tables, figures),
  `inputs` (the covariances and random streams of the simulations),
  `chunked` (a compiled sweep over points, chunk by chunk, with progress),
  `measures` (collapse depth, the entropy curves and their tolerance);
* `cli`: the absl command line of `launch/` (`run_experiment`).

Config file, module and experiment id share one name:
`configs/simulate_rho.py` sets `config.experiment = "simulate_rho"`, run by
`qkspec.experiments.simulate_rho.run`.
"""
