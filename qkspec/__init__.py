"""qkspec: when self-attention localizes (Bao, Hataya, Karakida, ICML 2024).

The pure maths lives in small modules, imported here as namespaces:
`softmax`, `randomwalk`, `spectrum`, `propagation`, `locater`, `diagnostics`.
"""
from qkspec import diagnostics
from qkspec import locater
from qkspec import propagation
from qkspec import randomwalk
from qkspec import softmax
from qkspec import spectrum

__version__ = "0.1.0"
