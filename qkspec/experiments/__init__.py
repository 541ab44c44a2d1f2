"""Paper experiments: one module per figure family, each with `run(config, workdir)`.

* `theory`: Eq. (6) over (xi, eta), Figs. 2-3, the Lemma 2 table;
* `entropy_bound`: the entropy lower bound Eq. (9) vs nu, Fig. 4;
* `simulation`: Monte Carlo rho_i and attention entropy, Fig. 5;
* `io`: workdir, config, table and figure helpers shared by the above.

The launch scripts in `launch/` only parse flags and call one `run`.
"""
