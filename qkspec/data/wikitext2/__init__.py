"""WikiText-2 as a tfds builder: `wikitext2.py`, with its checksums.tsv."""
