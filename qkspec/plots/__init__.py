"""matplotlib for every figure qkspec draws.

* `style`: the Agg backend, subplots, colours, saving a PNG;
* `training_figures`: the figures of a training run (Figs. 6-12).
"""
