"""Training with LocATER: Flax model, loss, step, loop, sweeps, checkpoints.

The only layer that imports flax, optax and orbax.

* `model`: the Sec. 2 theory model and the fairseq-style LM (Flax linen);
* `fused_xent`: the chunked output projection + cross-entropy (custom VJP);
* `tasks`: what is learned (random-walk regression or next-token LM);
* `step`: train state, LocATER objective and the jit-compiled steps;
* `loop`: `train_and_evaluate` (set-up, restore-or-init, the loop);
* `actions`: its periodic log, eval and checkpoint actions;
* `progress`, `interrupt`: progress lines with ETA, and Ctrl-C at a step
  boundary (checkpoint saved, then `interrupt.Interrupted`);
* `sweep`: members of a vmapped kappa/seed sweep;
* `layer_stats`: per-layer spectrum, entropy, rho and rank measurements;
* `checkpoint`, `metric_writer`: Orbax checkpoints and metric files.
"""
