"""The paper's maths as pure functions: arrays in, arrays out, explicit keys.

Imports only jax and numpy (tests/layering_test.py checks it).

* `softmax`: softmax, the piecewise-linear S~, the propagation event and
  the temperature (Sec. 2); `randomwalk`: Assumption 1's walks;
* `spectrum`: eigenspectrum statistics (Eqs. 5-8), controlled spectra;
* `propagation`: rho_i by Monte Carlo (Definition 1), Lemma 1, Eq. (6) and
  Lemma 2; `locater`: the LocATER penalty and its minimum (Sec. 6);
* `diagnostics`: attention entropy (Zhai), Eq. (9), rank collapse (Dong);
  `entropy_bounds`: Zhai et al.'s Theorem 3.1 bound;
* `san`, `san_paths`, `path_eval`: pure self-attention networks and their
  paths (Dong);
* `grid_bases`, `grid_estimator`: rho_i and entropy over an (eigen_mean,
  eigen_std) grid on common random numbers (Fig. 5).
"""
