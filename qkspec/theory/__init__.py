"""The paper's maths as pure functions: arrays in, arrays out, explicit keys.

Imports only jax and numpy (tests/layering_test.py checks it).

* `softmax`: softmax, the piecewise-linear softmax S~, the propagation
  event u_i in [0, 1] (Sec. 2) and the temperature lambda (None: the square
  root of the head width);
* `randomwalk`: Assumption 1's random walks and the anisotropic Sigma;
* `spectrum`: eigenspectrum statistics (Eqs. 5-8) and controlled spectra
  W_QK = B diag(w) B^T (Fig. 5);
* `propagation`: rho_i by Monte Carlo (Definition 1), Lemma 1's moments,
  Eq. (6) and Lemma 2;
* `locater`: the LocATER penalty, its hyperparameters and its own minimum
  W* = cI (Sec. 6);
* `diagnostics`: attention entropy (Zhai), Eq. (9), rank-collapse residuals
  (Dong);
* `entropy_bounds`: Zhai et al.'s Theorem 3.1 bound;
* `san`, `san_paths`: pure self-attention networks and their path
  decomposition (Dong);
* `grid_estimator`: the common-random-number estimator of rho_i and entropy
  over an (eigen_mean, eigen_std) grid (Fig. 5 on the plane); `grid_bases`
  draws the shared walks and spectra it evaluates.
"""
