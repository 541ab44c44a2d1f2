"""Training with LocATER: Flax model, loss, step, loop, sweeps, checkpoints.

The only layer that imports flax, optax and orbax.

* `model`, `san_model`: the Sec. 2 theory model, the fairseq-style LM and
  Dong et al.'s task SAN (Flax linen);
* `tasks`: what is learned (random-walk regression, next-token LM, sorting
  or memorisation), with batches that are pure functions of the step;
* `device_feed`, `multi_step`: batches gathered on the device and k steps
  per compiled call (the accelerator path);
* `sweep`: the members of a vmapped kappa/seed sweep;
* `layer_stats`: per-layer spectrum, entropy, rho and rank measurements;
* `step`: train state, LocATER objective and the jit-compiled steps;
* `checkpoint`, `metric_writer`, `progress`: Orbax checkpoints, metric
  files, progress lines and where the wall time went;
* `actions`: the loop's periodic log, eval and checkpoint actions;
* `preemption`: Ctrl-C and SIGTERM stop every process at one step boundary;
* `loop`: `train_and_evaluate` (set-up, restore-or-init, the loop).
"""
