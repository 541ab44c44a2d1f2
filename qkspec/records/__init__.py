"""A training run read back, and the small records the report keeps of it.

* `rundir`: `members.json` and each member's metrics and maps, from a
  training workdir or a record alike;
* `store`: a record written, listed and read (`reproduction/records/`).

No plotting and no jax: the report, the figures and the command line read
runs through here.
"""
