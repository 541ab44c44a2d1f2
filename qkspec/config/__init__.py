"""Config helpers for `configs/*.py`: defaults, the `:arg` grammar, checks.

Imports only ml_collections, so a config file loads without jax, flax or
the data pipeline.

* `args`: `parse_arg` (the one `--config file.py:smoke,L=3` grammar) and
  `load_config_file`;
* `defaults`: the training configs (`theory_config`, `lm_config`, `smoke`);
* `schema`: `validate`, which names the offending key of a bad config;
* `resume`: `changed_fields`, the changes a resumed run may not make.
"""
