r"""LocATER and the localization diagnostics on any Flax attention model.

The paper's measurements and its regularizer for a model qkspec did not
write: a `flax.linen` stack of `nn.MultiHeadDotProductAttention`, an
`nnx.MultiHeadAttention` model, qkspec's own models, or any module whose
query/key kernels `qk_spec` names.

* `qk_matrices(params_or_module)`: :math:`W_{QK} = W_Q^\top W_K` [H, d, d]
  of every attention layer, by its path;
* `locater_penalty(params_or_module, hparams)`: the Sec. 6 penalty summed
  over layers and heads, to add to a loss;
* `spectrum_table(params_or_module)`: scale, trace, xi, eta, r per head
  (Eqs. 5-8);
* `attention_table(apply_fn, variables, *args)`: entropy, :math:`\rho_i`
  and rank collapse per head from one run of the unmodified model.

`params_or_module` is linen params or variables, an nnx Module or its
State. Adding LocATER to a loss::

  from qkspec import for_flax, locater
  hparams = locater.LocaterHParams(kappa1=1e-2, kappa2=1e-2, target=1.0)
  def loss_fn(params, batch):
    return task_loss(params, batch) + for_flax.locater_penalty(params,
                                                               hparams)
"""
from qkspec.for_flax.attention import attention_stats, attention_table
from qkspec.for_flax.qk import (attention_layers, locater_penalty,
                                qk_matrices, spectrum_table)

__all__ = ("attention_layers", "attention_stats", "attention_table",
           "locater_penalty", "qk_matrices", "spectrum_table")
