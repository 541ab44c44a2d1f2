"""Training with LocATER; the only layer that imports flax, optax and orbax.

* `model`, `san_model`: the Flax modules; `layer_stats`: their measurements;
* `tasks`: what is learned, batches as pure functions of the step;
* `sweep`: a run's members, names, layout and mesh, worked out once
  (`make_plan`), and their vmapped, sharded steps;
* `step`, `multi_step`, `device_feed`: the compiled steps;
* `loop`: `train_and_evaluate`, with its `actions`, `progress`,
  `preemption`, `checkpoint` and `metric_writer`.
"""
