r"""LocATER and the localization diagnostics on any Flax attention model.

For linen and nnx attention (plain, scanned over layers, remat'd, jitted;
grouped-query, QK-norm, a custom `attention_fn` such as RoPE or
soft-capping), gemma (Gemma 2, 3, 4), MaxText (scanned on its second axis),
jax-ml/bonsai, Hugging Face's Flax BERT, RoBERTa, ViT and GPT-2, qkspec's
own models, or any layer whose query/key kernels `qk_spec` names;
`params_or_module` is linen params or variables, an nnx Module or its
State. Heads are never guessed: kernels that merge them ([d, N*D]) need
`num_heads`, an int, a pair (N, K) or {layer path: either}
(qkspec/for_flax/README.md shows each case).

* `qk_matrices`: :math:`W_{QK} = W_Q^\top W_K` [N, d, d] per layer, query
  head h reading key head h // (N/K), QK-norm gains folded in;
* `locater_penalty`: the Sec. 6 penalty summed over layers and heads;
* `spectrum_table`: scale, trace, xi, eta, r per head (Eqs. 5-8) at the
  model's logit scale (`temperature`, default :math:`\sqrt D`);
* `attention_table(apply_fn, variables, *args)`: entropy, :math:`\rho_i`
  and rank collapse per head from the probabilities one run of the
  unmodified model computes;
* `attention_table_from_weights(weights, mask, layout)`: entropy and
  :math:`\rho_i` per head from the attention probabilities a model
  returns (Hugging Face's `output_attentions=True`, gemma's
  `attention_weights`), masks per query allowed.

The penalty and the spectrum come from per-head [D, D] products of the
kernels, never a d x d matrix. Masks are respected (padded queries and keys
count nowhere), 16-bit parameters give float32 results, and a stacked layer
comes out as one layer per index, "path/l". `layouts` and `llm_layouts`
list the layouts found, `qk_norm` the norms.
"""
from qkspec.for_flax.attention import attention_table
from qkspec.for_flax.from_weights import attention_table_from_weights
from qkspec.for_flax.qk import locater_penalty, qk_matrices, spectrum_table

__all__ = ("attention_table", "attention_table_from_weights",
           "locater_penalty", "qk_matrices", "spectrum_table")
