"""Config helpers for `configs/*.py`; imports only ml_collections, not jax.

`args`: the `--config file.py:smoke,L=3` grammar; `defaults`: the training
configs; `schema.validate`, which names the bad key; `resume`: the changes
a resumed run may not make.
"""
