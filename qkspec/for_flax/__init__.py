r"""LocATER and the localization diagnostics on any Flax attention model.

For linen and nnx attention (plain, scanned over layers, remat'd, jitted),
Hugging Face's Flax BERT, RoBERTa, ViT and GPT-2, qkspec's own models, or
any layer whose query/key kernels `qk_spec` names; `params_or_module` is
linen params or variables, an nnx Module or its State. Heads are never
guessed: kernels that merge them ([d, H*D]) need `num_heads`, an int or
{layer path: int} (qkspec/for_flax/README.md shows each case).

* `qk_matrices`: :math:`W_{QK} = W_Q^\top W_K` [H, d, d] per layer;
* `locater_penalty`: the Sec. 6 penalty summed over layers and heads;
* `spectrum_table`: scale, trace, xi, eta, r per head (Eqs. 5-8) at
  :math:`\lambda = \sqrt D`;
* `attention_table(apply_fn, variables, *args)`: entropy, :math:`\rho_i`
  and rank collapse per head from one run of the unmodified model;
* `attention_table_from_weights(weights, mask)`: entropy and
  :math:`\rho_i` per head from the attention probabilities a model returns
  (Hugging Face's `output_attentions=True`).

Masks are respected (padded queries and keys count nowhere), 16-bit
parameters give float32 results, and a stacked layer comes out as one layer
per index, "path/l". `layouts` lists the layouts found.
"""
from qkspec.for_flax.attention import attention_table
from qkspec.for_flax.from_weights import attention_table_from_weights
from qkspec.for_flax.qk import locater_penalty, qk_matrices, spectrum_table

__all__ = ("attention_table", "attention_table_from_weights",
           "locater_penalty", "qk_matrices", "spectrum_table")
