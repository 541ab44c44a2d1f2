r"""Optional fast paths of the model, behind one switch: `model.kernels`.

Shapes: B = batch, T = tokens, H = heads, D = head width, d = model width,
N = tokens as rows, V = vocabulary.

The model calls these three functions and names no kernel; each equals its
XLA reference in value and gradient (tests/kernels/kernels_test.py and one test
file per kernel module, Pallas in its interpreter on a CPU):

* `attention`: softmax(mask(Q K^T / lambda)) V per head from the packed QKV
  projections (`attention_reference`);
* `post_ln`: LayerNorm(x + mask * u), Post-LN's add, dropout and
  LayerNorm (`post_ln_reference`);
* `output_xent`: sum_n w_n CE(h_n W, y_n), the output projection and the
  cross-entropy (`output_xent_reference`).

"xla" (the default, any device): the model's Flax layers and the chunked
XLA loss (`chunked_xent`). "pallas" (Hopper GPUs): one Triton kernel each
way for `attention` and `post_ln`, the loss through FlashAttention-3
(`flash_xent`); bench/README.md has their measured speed.
"""
# pylint: disable=invalid-name
import jax
import jax.numpy as jnp

from qkspec.kernels import chunked_xent
from qkspec.kernels import flash_xent
from qkspec.kernels.fused_attention import attention, attention_reference
from qkspec.kernels.fused_layer_norm import post_ln, post_ln_reference

__all__ = ["attention", "attention_reference", "post_ln", "post_ln_reference",
           "output_xent", "output_xent_reference"]


def output_xent(h_Nxd: jax.Array, kernel_dxV: jax.Array,
                targets_N: jax.Array, weights_N: jax.Array, *,
                impl: str = "xla", compute_dtype=jnp.float32) -> jax.Array:
  r"""Float32 :math:`\sum_n w_n \mathrm{CE}(h_n W, y_n)` without the [N, V]
  logits in memory: `kernel_dxV` W has no bias, `weights_N` are 0 for
  padding (not differentiated), `impl` is "xla" (`chunked_xent`, matmuls
  in `compute_dtype`) or "pallas" (`flash_xent`, float16).
  """
  if impl == "xla":
    return chunked_xent.fused_cross_entropy(h_Nxd, kernel_dxV, targets_N,
                                            weights_N, chunked_xent.CHUNK,
                                            compute_dtype)
  if impl == "pallas":
    return flash_xent.cross_entropy_sum(h_Nxd, kernel_dxV, targets_N,
                                        weights_N)
  raise ValueError(f"impl must be one of ('xla', 'pallas'), got {impl!r}.")


def output_xent_reference(h_Nxd, kernel_dxV, targets_N, weights_N
                          ) -> jax.Array:
  """`output_xent` from the whole [N, V] logits in float32."""
  logits = h_Nxd.astype(jnp.float32) @ kernel_dxV.astype(jnp.float32)
  lse = jax.nn.logsumexp(logits, axis=-1)
  z_y = jnp.take_along_axis(logits, targets_N[:, None], axis=-1)[:, 0]
  return jnp.sum(weights_N.astype(jnp.float32) * (lse - z_y))
