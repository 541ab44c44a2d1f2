r"""Times qkspec.for_flax against the jitted forward of the model it measures.

  python bench/for_flax.py            # 12 layers, d = 512, then the 8B layer
  python bench/for_flax.py --nobig    # the 12-layer model only

Part 1, a 12-layer pre-LN transformer (d = 512, 8 heads, MLP 4d, T = 256,
batch 4, float32, causal), written once in linen and once in nnx: the best
of `--repeats` jitted forwards, then each for_flax function as a user calls
it, as a ratio to that forward, in the same process: `spectrum_table`
(first call, with its compilation, and again), `jax.jit(jax.grad(
locater_penalty))` (after its compilation; beside it the same penalty from
the [H, d, d] W_QK matrices, `qk_matrices`), and `attention_table` on the
linen model (op by op) and on the nnx model with an `nnx.jit`'d apply
(first call, then again).

Part 2, one Llama-3-8B-shaped attention layer (d = 4096, N = 32 query and
K = 8 key heads of D = 128, random bf16 kernels): `spectrum_table` and
`jax.jit(jax.grad(locater_penalty))`, each in a child process, its time
(first call, compilation included) and how far its peak resident memory
(VmHWM, reset before the call) rises above the memory the parameters
already took; then the lowered computations (StableHLO) of both, searched
for an array with two axes of width d (none), beside that of `qk_matrices`
(which has one).

The machine may be shared: the ratios, taken in one process, hold better
than the seconds.
"""
# pylint: disable=invalid-name
import json
import os
import re
import subprocess
import sys
import time

from absl import app
from absl import flags
import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np

from qkspec import for_flax
from qkspec.for_flax import qk
from qkspec.theory import locater
from qkspec.theory import spectrum

_LAYERS = flags.DEFINE_integer("layers", 12, "Layers of the model.")
_WIDTH = flags.DEFINE_integer("width", 512, "Model width d.")
_HEADS = flags.DEFINE_integer("heads", 8, "Heads.")
_SEQ = flags.DEFINE_integer("seq", 256, "Tokens T.")
_BATCH = flags.DEFINE_integer("batch", 4, "Sequences.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed runs (best).")
_BIG = flags.DEFINE_bool("big", True, "Also the 8B-shaped layer.")
_CHILD = flags.DEFINE_string("child", None, "(internal) run one 8B "
                             "measurement: spectrum or grad.")
HP = locater.LocaterHParams(kappa1=1e-2, kappa2=1e-2, target=1.0)
BIG = dict(d=4096, N=32, K=8, D=128)


def _timed(fn, repeats=1):
  """(best seconds of `repeats` calls, the last result), blocking."""
  best, out = float("inf"), None
  for _ in range(repeats):
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    best = min(best, time.perf_counter() - start)
  return best, out


class LinenBlock(nn.Module):
  heads: int

  @nn.compact
  def __call__(self, x, mask):
    x = x + nn.MultiHeadDotProductAttention(self.heads, name="attn")(
        nn.LayerNorm()(x), mask=mask)
    h = nn.gelu(nn.Dense(4 * x.shape[-1])(nn.LayerNorm()(x)))
    return x + nn.Dense(x.shape[-1])(h)


class LinenNet(nn.Module):
  layers: int
  heads: int

  @nn.compact
  def __call__(self, x, mask):
    for l in range(self.layers):
      x = LinenBlock(self.heads, name=f"block_{l}")(x, mask)
    return x


class NnxBlock(nnx.Module):

  def __init__(self, d, heads, rngs):
    self.ln1, self.ln2 = nnx.LayerNorm(d, rngs=rngs), nnx.LayerNorm(d,
                                                                    rngs=rngs)
    self.attn = nnx.MultiHeadAttention(heads, d, decode=False, rngs=rngs)
    self.up, self.down = nnx.Linear(d, 4 * d, rngs=rngs), nnx.Linear(
        4 * d, d, rngs=rngs)

  def __call__(self, x, mask):
    x = x + self.attn(self.ln1(x), mask=mask)
    return x + self.down(nnx.gelu(self.up(self.ln2(x))))


class NnxNet(nnx.Module):

  def __init__(self, layers, d, heads, rngs):
    self.blocks = nnx.List([NnxBlock(d, heads, rngs) for _ in range(layers)])

  def __call__(self, x, mask):
    for block in self.blocks:
      x = block(x, mask)
    return x


def _dense_penalty(params):
  return sum(jnp.sum(locater.locater_penalty(w, HP.kappa1, HP.kappa2,
                                             HP.target))
             for w in for_flax.qk_matrices(params).values())


def model_part():
  """Part 1: ratios to the jitted forward of the 12-layer model."""
  d, H = _WIDTH.value, _HEADS.value
  x = jax.random.normal(jax.random.key(0), (_BATCH.value, _SEQ.value, d))
  mask = jnp.tril(jnp.ones((_SEQ.value, _SEQ.value), bool))[None, None]
  linen = LinenNet(_LAYERS.value, H)
  variables = jax.jit(linen.init)(jax.random.key(1), x, mask)
  forward = jax.jit(linen.apply)
  _timed(lambda: forward(variables, x, mask))
  base, _ = _timed(lambda: forward(variables, x, mask), _REPEATS.value)
  nnx_model = NnxNet(_LAYERS.value, d, H, nnx.Rngs(2))
  nnx_forward = nnx.jit(lambda m, x, mask: m(x, mask))
  _timed(lambda: nnx_forward(nnx_model, x, mask))
  nnx_base, _ = _timed(lambda: nnx_forward(nnx_model, x, mask),
                       _REPEATS.value)
  print(f"device: {jax.devices()[0].device_kind}, {os.cpu_count()} cores; "
        f"{_LAYERS.value} layers, d = {d}, {H} heads, T = {_SEQ.value}, "
        f"batch {_BATCH.value}")
  print(f"jitted forward: linen {base:.3f} s, nnx {nnx_base:.3f} s")

  def line(name, seconds, ref=base):
    print(f"{name:44s} {seconds:8.3f} s  {seconds / ref:6.2f}x forward")

  line("spectrum_table (first call)", _timed(
      lambda: for_flax.spectrum_table(variables))[0])
  line("spectrum_table (again)", _timed(
      lambda: for_flax.spectrum_table(variables), _REPEATS.value)[0])
  for name, fn in (("", lambda p: for_flax.locater_penalty(p, HP)),
                   (" from W_QK [H, d, d]", _dense_penalty)):
    grad = jax.jit(jax.grad(fn))
    _timed(lambda grad=grad: grad(variables["params"]))
    line(f"jit(grad(locater_penalty)){name}", _timed(
        lambda grad=grad: grad(variables["params"]), _REPEATS.value)[0])
  line("attention_table, linen, op by op (first call)", _timed(
      lambda: for_flax.attention_table(linen.apply, variables, x, mask))[0])
  line("attention_table, linen, op by op (again)", _timed(
      lambda: for_flax.attention_table(linen.apply, variables, x, mask),
      _REPEATS.value)[0])
  line("attention_table, nnx.jit (first call)", _timed(
      lambda: for_flax.attention_table(nnx_forward, nnx_model, x, mask))[0],
       nnx_base)
  line("attention_table, nnx.jit (again)", _timed(
      lambda: for_flax.attention_table(nnx_forward, nnx_model, x, mask),
      _REPEATS.value)[0], nnx_base)


def _status(field: str) -> int:
  """A /proc/self/status field in MiB."""
  text = open("/proc/self/status").read()   # pylint: disable=unspecified-encoding
  return int(re.search(rf"{field}:\s+(\d+) kB", text).group(1)) // 1024


def _big_params():
  d, N, K, D = BIG["d"], BIG["N"], BIG["K"], BIG["D"]
  keys = jax.random.split(jax.random.key(0), 4)
  shapes = {"query": (d, N, D), "key": (d, K, D), "value": (d, K, D),
            "out": (N, D, d)}
  return {"attn": {name: {"kernel": (jax.random.normal(k, shape) / np.sqrt(
      shape[0])).astype(jnp.bfloat16)} for k, (name, shape) in zip(
          keys, shapes.items())}}


def child(what: str) -> None:
  """One 8B measurement, printed as JSON: seconds and peak RSS growth."""
  params = jax.block_until_ready(_big_params())
  if what == "spectrum":
    run = lambda: for_flax.spectrum_table(params)  # noqa: E731
  else:
    grad = jax.jit(jax.grad(lambda p: for_flax.locater_penalty(p, HP)))
    run = lambda: grad(params)  # noqa: E731
  before = _status("VmRSS")
  with open("/proc/self/clear_refs", "w") as f:   # pylint: disable=unspecified-encoding
    f.write("5")                                  # VmHWM := VmRSS
  seconds, _ = _timed(run)
  again, _ = _timed(run)
  print(json.dumps(dict(seconds=seconds, again=again, params_mib=before,
                        peak_growth_mib=_status("VmHWM") - before)))


def _square_shapes(stablehlo: str, d: int) -> list[str]:
  """The array shapes in a lowered computation (`tensor<32x4096x128xf32>`)
  with two axes of width d."""
  shapes = [s.rstrip("x") for s in re.findall(r"tensor<((?:\d+x)+)[a-z]",
                                               stablehlo)]
  return [s for s in shapes if s.split("x").count(str(d)) >= 2]


def big_part():
  """Part 2: the 8B-shaped layer, each measurement in a child process."""
  d, N, K, D = BIG["d"], BIG["N"], BIG["K"], BIG["D"]
  print(f"\none attention layer, d = {d}, N = {N}, K = {K}, D = {D}, bf16 "
        "kernels (child processes):")
  for what, name in (("spectrum", "spectrum_table"),
                     ("grad", "jit(grad(locater_penalty))")):
    out = subprocess.run([sys.executable, __file__, f"--child={what}"],
                         capture_output=True, text=True, check=True)
    m = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{name:28s} {m['seconds']:7.2f} s (again {m['again']:.2f} s), "
          f"peak memory +{m['peak_growth_mib']} MiB over the "
          f"{m['params_mib']} MiB of the process with its parameters")
  shapes = jax.eval_shape(_big_params)
  q32 = jax.ShapeDtypeStruct((d, N, D), jnp.float32)
  k32 = jax.ShapeDtypeStruct((d, K, D), jnp.float32)
  for name, lowered in (
      ("spectrum_table's statistics", jax.jit(
          spectrum.kernel_spectrum_stats).lower(q32, k32, 1.0)),
      ("jit(grad(locater_penalty))", jax.jit(jax.grad(
          lambda p: for_flax.locater_penalty(p, HP))).lower(shapes)),
      ("qk_matrices (for contrast)", jax.jit(qk.qk_matrices).lower(shapes))):
    found = _square_shapes(lowered.as_text(), d)
    print(f"StableHLO of {name}: arrays with two axes of {d}: "
          f"{sorted(set(found)) or 'none'}")


def main(argv):
  del argv
  if _CHILD.value:
    child(_CHILD.value)
    return
  model_part()
  if _BIG.value:
    big_part()


if __name__ == "__main__":
  app.run(main)
