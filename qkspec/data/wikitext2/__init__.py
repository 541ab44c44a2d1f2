"""WikiText-2 as a tensorflow-datasets builder (`wikitext2`).

Importing this package registers the builder, so `tfds.builder("wikitext2")`
and `tfds.data_source("wikitext2")` work. See `wikitext2.py` for the stored
format and `tokens.py` for tokenisation, file names and checksums.
"""
from qkspec.data.wikitext2 import tokens
from qkspec.data.wikitext2.wikitext2 import Wikitext2

__all__ = ["Wikitext2", "tokens"]
