r"""The LM loss alone (projection + cross-entropy): XLA paths vs Pallas kernels.

Workload: the Fig. 6 sweep's loss, vmapped over M = 5 members: h [4096, 128],
W [128, 33,278], bfloat16 matmul inputs, float32 statistics; one call is the
loss and its gradients (dh, dW). Prints, from one process, for each path:
compile seconds, ms per call, the ratio to the chunked XLA loss
(`fused_xent`, 4096 rows per chunk: the fastest path measured so far, see
bench/gpu_results.md; also with its weight gradient as [d, V], "_dv", and
its logits block in bfloat16, "_bf16logits", fairseq's FP16 logits, which
halves the HBM bytes the trace shows the step is bound by), effective
TFLOP/s (6 N d V per member, the FLOPs of the plain forward + backward),
and the largest relative error of the loss
and of the gradients against a float32 plain reference computed in the same
process at `highest` precision. On a GPU that error line is the Pallas
kernels' first check on real hardware. Then each single Pallas setting's
forward kernel is timed alone, and the fastest forward composed with the
fastest backward ("F/B/B", each kernel its own blocks) is timed as one
more path: on the H100, with one setting for all three, the forward kernel
ran at ~141 TFLOP/s against ~311 for dh and ~396 for dW
(bench/gpu_results.md (4)).

  python bench/xent_kernel.py [--members 5] [--repeats 20]
      [--blocks 64x128x4x2,128x128x8x2,...]   # BN x BV x warps x stages
  python bench/xent_kernel.py --rehearse     # CPU: small shapes, interpreter

Also run as the `xent` stage of bench/gpu_paper.py.

With `tokamax` importable (optional; never a qkspec dependency; BUILD.md's
wheel list for a GPU image), its `linear_softmax_cross_entropy_loss` is
timed too: the issue's "evaluate what libraries offer". tokamax 0.0.17 has
no GPU kernel for it (its Pallas one is Mosaic TPU): on a GPU "tokamax" is
its default, the `xla` implementation (the logits written out), and
"tokamax_chunked" its `chunked_xla`. It takes no per-token weights; the
weights here are all ones.
"""
import argparse
import functools
import os
import sys
import time
import types

from absl import flags as absl_flags
import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
# pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.config import schema
from qkspec.training import fused_xent
from qkspec.training import pallas_xent

def _tokamax():
  """tokamax, or None. Its top-level import pulls its profiler helpers
  (xprof, a 32 MB wheel the loss never uses): stubbed when missing. It
  reads absl flags; this script's are argparse's, so absl's are marked
  parsed (their defaults). `$OPTIONAL_SITE` (bench/gpu_session.sh) goes
  to the end of sys.path first, so it never shadows an installed package."""
  extra = os.environ.get("OPTIONAL_SITE")
  if extra and extra not in sys.path:
    sys.path.append(extra)
  for attempt in range(2):
    try:
      import tokamax  # pylint: disable=g-import-not-at-top
      if not absl_flags.FLAGS.is_parsed():
        absl_flags.FLAGS.mark_as_parsed()
      return tokamax
    except ImportError as e:
      if attempt or "xprof" not in str(e):
        return None
      tools = types.ModuleType("xprof.cli.tools")
      tools.get_kernel_stats_tool = None
      sys.modules.update({"xprof": types.ModuleType("xprof"),
                          "xprof.cli": types.ModuleType("xprof.cli"),
                          "xprof.cli.tools": tools})
      for name in [n for n in sys.modules if n.startswith("tokamax")]:
        del sys.modules[name]
  return None


# BN x BV x warps x stages [x vocabulary splits of the forward]; "F/DH/DW"
# gives each kernel its own (the dh kernel may take splits too); "F/fwd/DW"
# takes dh from the forward kernel (pallas_xent's dh_in_forward: a flash-
# attention-like forward with a [BN, d] float32 accumulator, whose best
# blocks may be flash attention's, BN 128 x BV 64 with 8 warps). BV 64 keeps
# the backward kernels well under ptxas' 255 registers (128-168 against
# 255 at BV 128: bench/deviceless.py), so more programs share a
# multiprocessor. 64x256x8x2 and 128x64x4x3, whose backward kernels spill,
# were the slowest on the H100 (bench/gpu_results.md (4), (6)) and are left
# out. "F/fa3/DW" takes the forward from jax's FlashAttention-3 kernel
# (qkspec/training/flash_forward.py: F's BN, BV, STAGES and SPLITS are its
# block_q, block_kv, concurrent steps and vocabulary splits; block_q 128
# spills 692 bytes, bench/gpu_results.md (8)); "F/fa3/fa3xG" its dW too
# (`flash_forward.weight_grad`: the vocabulary as queries, the tokens as
# keys in G groups: fewer groups, longer key loops and fewer copies of W,
# more groups, less float16 range per group).
DEFAULT_BLOCKS = ("64x128x4x2,128x128x8x2,32x128x4x2,64x64x4x2,64x64x8x2,"
                  "64x128x4x2x2,64x128x4x2x4,"
                  "64x128x4x2x4/64x128x4x2x4/64x128x4x2,"
                  "64x128x4x2/fwd/64x128x4x2,64x128x8x2/fwd/64x128x4x2,"
                  "128x64x8x2/fwd/64x128x4x2,128x128x8x2/fwd/64x128x4x2,"
                  "64x64x4x3/fwd/64x128x4x2,64x128x4x2x2/fwd/64x128x4x2,"
                  "64x64x8x2/fwd/64x64x8x2,128x64x8x2/fwd/64x64x8x2,"
                  "64x128x4x2x4/fa3/64x128x4x2,64x128x4x2x2/fa3/64x128x4x2,"
                  "64x64x4x2x4/fa3/64x64x8x2,64x64x4x3x4/fa3/64x64x8x2,"
                  "64x128x4x2x4/fa3/fa3x1,64x128x4x2x4/fa3/fa3x2,"
                  "64x128x4x2x4/fa3/fa3x4")


def _plain(h, kernel, targets, weights, dtype):
  z = jnp.dot(h.astype(dtype), kernel.astype(dtype),
              preferred_element_type=jnp.float32)
  return jnp.sum(weights * optax.softmax_cross_entropy_with_integer_labels(
      z, targets))


def _chunked(h, kernel, targets, weights, layout, logits, dtype):
  """fused_xent at 4096 rows per chunk, a kernel-gradient layout and a
  logits dtype (the variants a GPU may prefer: bench/gpu_results.md)."""
  return fused_xent.fused_cross_entropy(h, kernel, None, targets, weights,
                                        4096, dtype, layout, logits)


def _tokamax_loss(tokamax, implementation, dtype, h, kernel, targets,
                  weights):
  del weights                  # all ones (tokamax takes none)
  return tokamax.linear_softmax_cross_entropy_loss(
      h.astype(dtype), targets, kernel.astype(dtype), reduction="sum",
      implementation=implementation)


def paths(blocks: str, dtype) -> dict:
  """name -> loss(h, kernel, targets, weights)."""
  out = {
      "chunked4096": lambda h, k, y, w: fused_xent.fused_cross_entropy(
          h, k, None, y, w, 4096, dtype),
      "plain": functools.partial(_plain, dtype=dtype),
      "chunked1024": lambda h, k, y, w: fused_xent.fused_cross_entropy(
          h, k, None, y, w, 1024, dtype),
  }
  for name, layout, logits in (("chunked4096_dv", "dv", jnp.float32),
                               ("chunked4096_bf16logits", "vd", dtype),
                               ("chunked4096_dv_bf16logits", "dv", dtype)):
    out[name] = functools.partial(_chunked, layout=layout, logits=logits,
                                  dtype=dtype)
  tokamax = _tokamax()
  if tokamax is not None:
    for name, impl in (("tokamax", None), ("tokamax_chunked", "chunked_xla")):
      out[name] = functools.partial(_tokamax_loss, tokamax, impl, dtype)
  else:
    print("  (tokamax not importable: its path is skipped)", flush=True)
  for spec in filter(None, blocks.split(",")):
    out[PALLAS + spec] = _pallas(spec, dtype)
  return out


PALLAS = "pallas_"          # a Pallas path's name: this + its setting


def _pallas(spec: str, dtype):
  """The Pallas loss at setting `spec` (`schema.pallas_settings`)."""
  return functools.partial(pallas_xent.linear_cross_entropy,
                           compute_dtype=dtype,
                           **schema.pallas_settings(spec))


def inputs(members, n, d, v, seed=0):
  ks = jax.random.split(jax.random.key(seed), 4)
  h = jax.random.normal(ks[0], (members, n, d))
  kernel = jax.random.normal(ks[1], (members, d, v)) * d**-0.5
  targets = jax.random.randint(ks[2], (members, n), 0, v)
  weights = jnp.ones((members, n), jnp.float32)
  return h, kernel, targets, weights


def _program(loss):
  return jax.jit(jax.vmap(jax.value_and_grad(loss, (0, 1))))


def _forward_program(loss):
  """The loss value alone: for a Pallas loss, its forward kernel alone."""
  return jax.jit(jax.vmap(loss))


def _time(program, args, repeats):
  """(compile s, ms per call, last output) of a jitted program."""
  t = time.perf_counter()
  out = jax.block_until_ready(program(*args))
  compile_s = time.perf_counter() - t
  t = time.perf_counter()
  for _ in range(repeats):
    out = program(*args)
  jax.block_until_ready(out)
  return compile_s, (time.perf_counter() - t) / repeats * 1e3, out


def composed(totals: dict, forwards: dict) -> str | None:
  """"F/B/B": the setting F whose forward kernel alone was fastest, with
  the backward kernels of the setting B whose backward (its loss and
  gradient's time less its forward's) was; None when one setting is both
  (nothing to compose). totals, forwards: setting -> ms."""
  both = [spec for spec in totals if spec in forwards]
  if len(both) < 2:
    return None
  fwd = min(both, key=forwards.get)
  bwd = min(both, key=lambda spec: totals[spec] - forwards[spec])
  bwd = "x".join(bwd.split("x")[:4])   # a single setting's splits: forward's
  return None if fwd == bwd else f"{fwd}/{bwd}/{bwd}"


def _rel_err(got, want):
  (v1, g1), (v2, g2) = got, want
  err = lambda a, b: float(jnp.max(jnp.abs(a - b)) / jnp.max(jnp.abs(b)))
  return err(v1, v2), max(err(a, b) for a, b in zip(g1, g2))


def run(members=5, n=4096, d=128, v=33_278, blocks=DEFAULT_BLOCKS,
        repeats=20, dtype=jnp.bfloat16, only=""):
  """Prints the table; returns {path: (ms per call, rel. gradient error)}.

  After the paths, each single Pallas setting's forward kernel is timed
  alone (the loss value without gradients); where the fastest forward and
  the fastest backward (loss and gradient less forward) come from two
  settings, their composition "F/B/B" (`schema.pallas_settings`: each
  kernel its own blocks) is timed as one more path. `best_pallas` of the
  result is the fastest accurate Pallas setting.
  """
  args = inputs(members, n, d, v)
  with jax.default_matmul_precision("highest"):
    exact = jax.block_until_ready(
        _program(functools.partial(_plain, dtype=jnp.float32))(*args))
  flops = 6 * n * d * v * members
  print(f"xent: {members} members x [N {n}, d {d}] @ [d, V {v}], "
        f"{jnp.dtype(dtype).name}, {jax.devices()[0].device_kind}",
        flush=True)
  print(f"  {'path':{_W}s} compile_s   ms/call  x chunked4096  "
        "TFLOP/s  rel.err loss  rel.err grad", flush=True)
  times = {}

  def row(name, loss):
    try:
      compile_s, ms, out = _time(_program(loss), args, repeats)
    except Exception as e:  # pylint: disable=broad-except
      print(f"  {name:{_W}s} failed: {type(e).__name__}: {str(e)[:300]}",
            flush=True)
      return
    loss_err, grad_err = _rel_err(out, exact)
    times[name] = (ms, grad_err)
    ref = times.get("chunked4096", (None,))[0]
    ratio = f"{ref / ms:13.2f}" if ref else "            -"
    print(f"  {name:{_W}s} {compile_s:9.1f} {ms:9.3f} {ratio}  "
          f"{flops / ms / 1e9:7.1f}  {loss_err:12.2e}  {grad_err:12.2e}",
          flush=True)

  losses = paths(blocks, dtype)
  for name, loss in losses.items():
    if not only or name in only.split(","):
      row(name, loss)
  forwards = {}                  # single settings: the forward kernel alone
  for name in [n for n in times if n.startswith(PALLAS) and "/" not in n]:
    try:
      _, forwards[name[len(PALLAS):]], _ = _time(
          _forward_program(losses[name]), args, repeats)
    except Exception as e:  # pylint: disable=broad-except
      print(f"  forward {name} failed: {type(e).__name__}", flush=True)
  if forwards:
    print("  forward kernel alone (ms/call): " + ", ".join(
        f"{spec} {ms:.3f}" for spec, ms in forwards.items()), flush=True)
  spec = composed({n[len(PALLAS):]: ms for n, (ms, _) in times.items()
                   if n.startswith(PALLAS)}, forwards)
  if spec and PALLAS + spec not in times:
    row(PALLAS + spec, _pallas(spec, dtype))
  return times


_W = 26 + 2 * 12               # the path column: room for "F/DH/DW" specs


def best_pallas(times: dict, max_grad_err: float = 2e-2) -> str | None:
  """The fastest Pallas setting ("BNxBVxWARPSxSTAGES", or "F/DH/DW") whose
  gradients are within `max_grad_err` (relative, bf16 rounding is ~5e-3)
  of the float32 reference, or None."""
  ok = {name[len(PALLAS):]: ms for name, (ms, err) in times.items()
        if name.startswith(PALLAS) and err <= max_grad_err}
  return min(ok, key=ok.get) if ok else None


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--members", type=int, default=5)
  p.add_argument("--repeats", type=int, default=20)
  p.add_argument("--blocks", default=DEFAULT_BLOCKS,
                 help="Pallas settings BNxBVxwarpsxstages, comma-separated")
  p.add_argument("--dtype", default="bfloat16")
  p.add_argument("--rehearse", action="store_true",
                 help="CPU: small shapes, Pallas in its interpreter")
  flags = p.parse_args()
  shape = dict(n=128, d=32, v=1000) if flags.rehearse else {}
  times = run(flags.members, blocks=flags.blocks, repeats=flags.repeats,
               dtype=jnp.dtype(flags.dtype), **shape)
  print(f"fastest accurate Pallas setting: {best_pallas(times)} "
        "(config.model.loss_pallas)", flush=True)


if __name__ == "__main__":
  main()
