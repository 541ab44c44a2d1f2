r"""LocATER and the localization diagnostics on any Flax attention model.

For linen `nn.MultiHeadDotProductAttention` stacks, nnx `MultiHeadAttention`
models, qkspec's own, or any layer whose query/key kernels `qk_spec` names;
`params_or_module` is linen params or variables, an nnx Module or its State
(README.md shows LocATER added to a loss).

* `qk_matrices`: :math:`W_{QK} = W_Q^\top W_K` [H, d, d] per layer;
* `locater_penalty`: the Sec. 6 penalty summed over layers and heads;
* `spectrum_table`: scale, trace, xi, eta, r per head (Eqs. 5-8);
* `attention_table(apply_fn, variables, *args)`: entropy, :math:`\rho_i`
  and rank collapse per head from one run of the unmodified model.
"""
from qkspec.for_flax.attention import attention_table
from qkspec.for_flax.qk import locater_penalty, qk_matrices, spectrum_table

__all__ = ("attention_table", "locater_penalty", "qk_matrices",
           "spectrum_table")
