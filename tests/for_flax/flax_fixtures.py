"""Fixtures of the qkspec.for_flax tests: small linen and nnx attention
models, plain and stacked, their inputs, and a closeness check that logs
its largest difference from NumPy."""
import functools

from absl import logging
import jax
import numpy as np

# The Flax attention models of the qkspec.for_flax tests: batch, sequence
# length, width, heads and stacked layers.
FLAX_B, FLAX_T, FLAX_D, FLAX_H, FLAX_L = 3, 5, 8, 2, 2


@functools.cache
def flax_nets() -> tuple[type, type]:
  """(LinenNet, NnxNet): two Flax attention layers with skips, `FLAX_H`
  heads on width `FLAX_D`. LinenNet(use_bias) stacks
  `nn.MultiHeadDotProductAttention` and sows its weights; NnxNet(rngs)
  stacks causal `nnx.MultiHeadAttention`. Imports flax only when used."""
  # pylint: disable=g-import-not-at-top
  import flax.linen as nn
  from flax import nnx

  class LinenNet(nn.Module):
    use_bias: bool = True

    @nn.compact
    def __call__(self, x, mask=None):
      for l in range(2):
        x = x + nn.MultiHeadDotProductAttention(
            FLAX_H, use_bias=self.use_bias, name=f"attn_{l}")(
                x, mask=mask, sow_weights=True)
      return x

  class NnxNet(nnx.Module):

    def __init__(self, rngs):
      self.layers = nnx.List([nnx.MultiHeadAttention(FLAX_H, FLAX_D,
                                                     decode=False, rngs=rngs)
                              for _ in range(2)])

    def __call__(self, x, mask=None, sow=False):
      for layer in self.layers:
        x = x + layer(x, mask=mask, is_causal=True, sow_weights=sow)
      return x

  return LinenNet, NnxNet


@functools.cache
def flax_stacks() -> tuple[type, type, type]:
  """(LinenScan, LinenRemat, NnxScan): `FLAX_L` attention layers with skips,
  `FLAX_H` heads on width `FLAX_D`. LinenScan(remat) is `nn.scan` over a
  block (its kernels [L, d, H, D] under "layers/attn"), each block
  `nn.remat`'d if `remat`; LinenRemat `nn.remat`s each of its blocks
  "block_l"; NnxScan(rngs) builds its layers with `nnx.vmap` and runs them
  with `nnx.scan` (kernels [L, d, H, D] under "layers"). Each takes
  (x, mask=None)."""
  # pylint: disable=g-import-not-at-top
  import flax.linen as nn
  from flax import nnx

  class Block(nn.Module):
    @nn.compact
    def __call__(self, x, mask):
      return x + nn.MultiHeadDotProductAttention(FLAX_H, name="attn")(
          x, mask=mask), None

  class LinenScan(nn.Module):
    remat: bool = False

    @nn.compact
    def __call__(self, x, mask=None):
      block = nn.remat(Block) if self.remat else Block
      x, _ = nn.scan(block, variable_axes={"params": 0},
                     split_rngs={"params": True}, in_axes=nn.broadcast,
                     length=FLAX_L)(name="layers")(x, mask)
      return x

  class LinenRemat(nn.Module):
    @nn.compact
    def __call__(self, x, mask=None):
      for l in range(FLAX_L):
        x, _ = nn.remat(Block)(name=f"block_{l}")(x, mask)
      return x

  class NnxScan(nnx.Module):

    def __init__(self, rngs):
      @nnx.split_rngs(splits=FLAX_L)
      @nnx.vmap(in_axes=(0,), out_axes=0)
      def layers(rngs):
        return nnx.MultiHeadAttention(FLAX_H, FLAX_D, decode=False,
                                      rngs=rngs)
      self.layers = layers(rngs)

    def __call__(self, x, mask=None):
      @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=nnx.Carry)
      def body(x, layer):
        return x + layer(x, mask=mask, is_causal=True)
      return body(x, self.layers)

  return LinenScan, LinenRemat, NnxScan


def flax_inputs() -> np.ndarray:
  """The for_flax tests' inputs [FLAX_B, FLAX_T, FLAX_D]."""
  return np.asarray(jax.random.normal(jax.random.key(1),
                                      (FLAX_B, FLAX_T, FLAX_D)))


def float64_tree(tree):
  """`tree` with each leaf a float64 NumPy array."""
  return jax.tree.map(lambda a: np.asarray(a, np.float64), tree)


def assert_close(what: str, got, want, rtol=0.0, atol=0.0) -> None:
  """np.testing.assert_allclose, logging the largest difference (shown by
  `pytest ... -o log_cli=true --log-cli-level=INFO`)."""
  got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
  diff = np.abs(got - want)
  with np.errstate(divide="ignore", invalid="ignore"):
    relative = np.nanmax(np.where(diff > 0, diff / np.abs(want), 0.0))
  logging.info("%s: max |diff| %.3g, relative %.3g", what, np.nanmax(diff),
               relative)
  np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)
