"""Data: WikiText-2 as a tfds builder (`wikitext2/`) and token batches.

`pipeline`: fairseq-style token blocks from the builder's array_record
files, batches that are pure functions of (seed, step); `synthetic`: Dong
et al.'s small sequence tasks (`configs/dong_trained.py`).
"""
