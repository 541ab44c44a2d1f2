r"""LocATER and the localization diagnostics on any Flax attention model.

For a model qkspec did not write: linen `nn.MultiHeadDotProductAttention`
stacks, nnx `MultiHeadAttention` models, qkspec's own, or any layer whose
query/key kernels `qk_spec` names. `params_or_module` is linen params or
variables, an nnx Module or its State.

* `qk_matrices`: :math:`W_{QK} = W_Q^\top W_K` [H, d, d] per layer;
* `locater_penalty`: the Sec. 6 penalty summed over layers and heads;
* `spectrum_table`: scale, trace, xi, eta, r per head (Eqs. 5-8);
* `attention_table(apply_fn, variables, *args)`: entropy, :math:`\rho_i`
  and rank collapse per head from one run of the unmodified model.

Adding LocATER to a loss::

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
