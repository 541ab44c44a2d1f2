"""Data: WikiText-2 as a tfds builder (`wikitext2/`) and token batches.

* `pipeline`: array_record files read with `tfds.data_source`, fairseq-style
  token blocks, batches that are pure functions of (seed, step), and a grain
  loader;
* `synthetic`: the small sequence tasks of Dong et al. (sorting,
  memorisation) for `configs/dong_trained.py`.

Import the module you need: `from qkspec.data import pipeline`.
"""
