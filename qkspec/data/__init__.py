"""Data: WikiText-2 as a tfds builder (`wikitext2/`), fairseq-style token
batches that are pure functions of (seed, step) (`pipeline`), and Dong et
al.'s small sequence tasks (`synthetic`).
"""
