r"""What an H100 would compile, on a machine without a GPU.

  JAX_PLATFORMS=cpu python bench/deviceless.py [--settings S1,S2,...]
      [--step scan_bf16_pallas [--step_figs 6,8,10] [--set K=V,...]]
      [--attention 32,128]
      [--tfds_dir .gpudata/tfds] [--out DIR]

XLA compiles for a GPU it does not have from a description of it (a
`GpuTargetConfigProto`, written here from the H100 SXM's public numbers)
through the CUDA plugin's compile-only client, running the real `ptxas`.
So a CPU-only session can see two things that otherwise wait for a GPU
slice:

* per Pallas setting (`model.loss_pallas`), the registers and spill bytes
  of each kernel of the loss at the paper's shapes (5 members, N 4096, d
  128, V 33,278, bf16), from `ptxas -v`, and what its PTX uses to multiply
  and load (`_PTX_COUNTS`: Hopper warpgroup or older warp-level matmuls,
  how many are waited for at once, cp.async or TMA loads). Spills cost:
  on the H100 the settings whose dh or dW kernel spilled were the slow ones
  (bench/gpu_results.md (4) and (6)).
* with --step, the optimised HLO of a Fig. 6 train step (--step_figs:
  other figures' too; --set: config overrides on top of the path's, e.g.
  model.fused_qkv=False) on a bench/gpu_paper.py path (written to
  OUT/PATH.txt.gz, which bench/trace_summary.py reads beside a trace), the
  kernels one step launches (`trace_summary.loop_kernels`: deeper models
  pay per kernel), the registers and spills of the layers' Pallas kernels
  (`LAYER_KERNELS`; and where ptxas serialized their warpgroup matmuls
  for want of registers), the fusions that move the most bytes, each
  with what it computes (`trace_summary.hlo_fusions`), and how long jax
  and then XLA took to compile the step on this machine (a GPU host's
  compilation, less its autotuning: the first run of a lane waits for it,
  bench/gpu_section.sh).

* with --attention, the kernels of the causal attention's forward and
  backward by implementation: `qkspec.training.attention_kernel` (the
  model's `attention_impl="pallas"`), XLA's, and tokamax's (`$OPTIONAL_SITE`).

Nothing runs, so nothing on the GPU is timed: no autotuning either, so
XLA's own matmuls keep default tiles. Needs, in an environment of its own
(never the project's: the plugin must stay out of the CPU install), the
CUDA plugin of the installed jax version and a `ptxas` on PATH (a CUDA
toolkit's)::

  python -m pip install "jax-cuda12-plugin==$JAXVER" "jax-cuda12-pjrt==$JAXVER"

`JAX_PLATFORMS=cpu` keeps the plugin from looking for a GPU at start-up;
the script then asks it for an H100 topology.
"""
import argparse
import collections
import functools
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
# pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.config import schema
from qkspec.training import pallas_xent
import startup
import trace_summary
import xent_kernel

# NVIDIA H100 80GB HBM3 (SXM): 132 SMs, 228 KiB shared memory per SM (227
# KiB per block opt-in), 64 Ki registers per SM, 50 MiB L2, 3.35 TB/s.
H100 = """gpu_device_info {
  threads_per_block_limit: 1024 threads_per_warp: 32
  shared_memory_per_block: 49152 shared_memory_per_core: 233472
  shared_memory_per_block_optin: 232448
  threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  thread_dim_limit_x: 1024 thread_dim_limit_y: 1024 thread_dim_limit_z: 64
  registers_per_core_limit: 65536 registers_per_block_limit: 65536
  memory_bandwidth: 3352320000000 l2_cache_size: 52428800
  clock_rate_ghz: 1.98 device_memory_size: 84942979072
  cuda_compute_capability { major: 9 feature_extension: ACCELERATED_FEATURES }
  device_vendor: "NVIDIA Corporation" name: "NVIDIA H100 80GB HBM3"
}
platform_name: "CUDA"
dnn_version_info { major: 9 minor: 8 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def _stub_cuda_runtime_version():
  """jax's FlashAttention-3 (`flash_forward`) asks the CUDA runtime for its
  version (only to refuse causal masks, which the loss does not use);
  a compile-only client has no runtime to ask, so it is told 12.9."""
  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas.ops.gpu import attention_mgpu

  class _Versions:
    @staticmethod
    def cuda_runtime_get_version():
      return 12090
  attention_mgpu.cuda_versions = _Versions


def h100_mesh(axis: str):
  """A one-device mesh of an H100 that is not there (compile only)."""
  from jax.experimental import topologies  # pylint: disable=g-import-not-at-top
  try:
    topology = topologies.get_topology_desc(
        platform="cuda", target_config=H100, topology="1x1x1")
  except (NotImplementedError, RuntimeError) as e:
    raise SystemExit(
        f"no CUDA compile-only client ({type(e).__name__}: {e}): install "
        f"jax-cuda12-plugin and jax-cuda12-pjrt =={jax.__version__} in an "
        "environment of their own and run with JAX_PLATFORMS=cpu (module "
        "docstring)") from None
  _stub_cuda_runtime_version()
  return topologies.make_mesh(topology, (1,), (axis,))


# Appended to the log per PTX file compiled: its entry and instruction
# counts (static, in the unrolled code): Hopper warpgroup matmuls, the
# warp-level ones of earlier GPUs, waits for every warpgroup matmul
# outstanding (a synchronous matmul), cp.async tile loads and TMA (bulk
# tensor) copies.
_PTX_COUNTS = (("wgmma", "wgmma.mma_async"),
               ("mma_sync", "mma.sync.aligned"),
               ("wait0", "wgmma.wait_group.sync.aligned 0;"),
               ("cp_async", "cp.async.cg"),
               ("tma", "cp.async.bulk.tensor"))


def ptxas_logger(log: str) -> str:
  """A directory with a `ptxas` that runs the real one with -v, its report
  appended to `log` after a "PTX ENTRY name=count ..." line per input
  (`_PTX_COUNTS`) and passed on (Mosaic GPU reads ptxas' messages); put it
  first on PATH."""
  real = shutil.which("ptxas")
  if real is None:
    raise SystemExit("no ptxas on PATH: install a CUDA toolkit (BUILD.md)")
  d = tempfile.mkdtemp(prefix="ptxas_v_")
  counts = " ".join(f"{name}=$(grep -c '{text}' \"$a\")"
                    for name, text in _PTX_COUNTS)
  with open(os.path.join(d, "ptxas"), "w") as f:
    f.write(f"""#!/bin/sh
for a in "$@"; do
  if [ -f "$a" ] && grep -q '[.]entry ' "$a"; then
    e=$(grep -m1 -o '[.]entry [A-Za-z_0-9]*' "$a" | cut -d' ' -f2)
    echo "PTX $e {counts}" >> "{log}"
  fi
done
err=$(mktemp)
"{real}" -v "$@" 2> "$err"
rc=$?
cat "$err" >> "{log}"
cat "$err" >&2
rm -f "$err"
exit $rc
""")
  os.chmod(os.path.join(d, "ptxas"), 0o755)
  return d


KERNEL_W = len("entry_mosaic_gpu_kernel")   # the longest kernel name


def _ours(kernel: str) -> bool:
  """The loss's kernels: pallas_xent's ("xent_*") and FlashAttention-3's
  (Mosaic GPU names its entry "entry_mosaic_gpu_kernel")."""
  return kernel.startswith("xent") or "mosaic_gpu" in kernel


# The layers' Pallas kernels (their pallas_call names), which --step reports
LAYER_KERNELS = ("packed_attention", "qkv_attention", "add_dropout_norm",
                 "proj_norm", "ffn_norm")


def layer_kernel(kernel: str) -> bool:
  return kernel.removesuffix("_backward") in LAYER_KERNELS


def kernel_resources(report: str, keep=_ours) -> dict[str, tuple[int, int]]:
  """Kernel name -> (registers, spill store bytes) from `ptxas -v` text,
  the kernels `keep` names (default the loss's, `_ours`)."""
  out, name, spill = {}, None, 0
  for line in report.splitlines():
    if m := re.search(r"Compiling entry function '(\w+)'", line):
      name = m.group(1)
    elif m := re.search(r"(\d+) bytes spill stores", line):
      spill = int(m.group(1))
    elif (m := re.search(r"Used (\d+) registers", line)) and name:
      if keep(name):
        out[name] = (int(m.group(1)), spill)
      name = None
  return out


def serialized_wgmma(report: str) -> set[str]:
  """The kernels whose warpgroup matmuls ptxas serialized for want of
  registers (its C7512 note), a cost that spill bytes do not show."""
  return set(re.findall(r"C7512\).*wgmma.*serialized.*function '(\w+)'",
                        report))


def kernel_instructions(report: str) -> dict[str, dict[str, int]]:
  """Kernel name -> `_PTX_COUNTS` from `ptxas_logger`'s "PTX" lines, the
  loss's kernels only (`_ours`)."""
  out = {}
  for line in report.splitlines():
    fields = line.split()
    if len(fields) > 2 and fields[0] == "PTX" and _ours(fields[1]):
      out[fields[1]] = {k: int(v) for k, v in
                        (f.split("=") for f in fields[2:])}
  return out


def compile_loss(mesh, spec: str, log: str, members=5, n=4096, d=128,
                 v=33_278) -> str:
  """The ptxas report of the loss and its gradients at setting `spec`."""
  loss = functools.partial(pallas_xent.linear_cross_entropy,
                           compute_dtype=jnp.bfloat16, interpret=False,
                           **schema.pallas_settings(spec))
  sharding = jax.NamedSharding(mesh, jax.P())
  args = [jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding)
          for x in jax.eval_shape(lambda: xent_kernel.inputs(members, n, d,
                                                              v))]
  open(log, "w").close()
  with jax.set_mesh(mesh):
    jax.jit(jax.vmap(jax.value_and_grad(loss, (0, 1)))).lower(
        *args).compile()
  with open(log) as f:
    return f.read()


def _as_gpu():
  """The library picks CPU or GPU code by `jax.default_backend()` (member
  batching, steps per call, Pallas' interpreter) and puts the token
  streams on the devices: here the GPU's choices, and abstract arrays."""
  jax.default_backend = lambda: "gpu"
  jax.make_array_from_process_local_data = (
      lambda sharding, x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype,
                                               sharding=sharding))


def step_hlo(path: str, tfds_dir: str, k: int = 4, fig: int = 6,
             overrides: str = "") -> tuple[str, float, float]:
  """(optimised HLO, seconds of jax's building, tracing and lowering,
  seconds of XLA's compilation) of k scanned steps of Fig. `fig`'s sweep
  on gpu_paper's `path`, with `overrides` ("model.fused_qkv=False,...")
  on top."""
  t = time.perf_counter()
  _as_gpu()
  import gpu_paper  # pylint: disable=g-import-not-at-top
  from qkspec.training import step as step_lib  # pylint: disable=g-import-not-at-top
  from qkspec.training import sweep as sweep_lib  # pylint: disable=g-import-not-at-top
  flags = argparse.Namespace(manual_dir="", tfds_dir=tfds_dir, steps=50_000,
                             pallas=None, k=k, rehearse=False)
  config = gpu_paper.fig_config(flags, fig, path)
  config.update_from_flattened_dict(dict(
      startup.parse_override(kv) for kv in filter(None, overrides.split(","))))
  mesh = h100_mesh("data")
  steps = step_lib.build_steps(config, mesh=mesh)
  ik, dk, hp = step_lib.member_inputs(sweep_lib.members(config),
                                      sweep_lib.is_sweep(config))
  feed, rep = steps.task.feed, steps.replicated
  like = lambda x, s=rep: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)  # noqa: E731
  with jax.set_mesh(mesh):
    state = jax.tree.map(like, jax.eval_shape(lambda: steps.init(ik, hp)))
    xs = jax.tree.map(functools.partial(like, s=feed.ids_sharding),
                      jax.eval_shape(lambda: feed.train_inputs(0, k)))
    lowered = steps.train_many.lower(state, feed.consts, xs,
                                     jax.tree.map(like, dk))
    lowered_at = time.perf_counter()
    text = lowered.compile().as_text()
  return text, lowered_at - t, time.perf_counter() - lowered_at


def attention_kernels(mesh, head_dim: int, members=5, batch=64,
                      seq=64) -> dict[str, str]:
  """Implementation -> the kernels (or the error) of the causal attention's
  forward and backward at [members, B, T, 1, D] bf16 under vmap (a sum of
  squares of the output as the loss: two fusions of every count):
  `attention_kernel` (jax's Pallas example), its `packed_attention`, the
  jnp sum (XLA), and
  tokamax's `dot_product_attention` where importable (`$OPTIONAL_SITE`;
  its device check off: `tokamax_cross_compile`)."""
  # pylint: disable=g-import-not-at-top
  from absl import flags as absl_flags
  from qkspec.training import attention_kernel
  lam = head_dim ** 0.5
  impls = {
      "attention_kernel": lambda q, k, v: attention_kernel.attention(
          q, k, v, lam, interpret=False),
      # the packed kernel from q, k, v stacked here (a kernel each way
      # that the model, which has them packed, does not launch)
      "packed_attention": lambda q, k, v: attention_kernel.packed_attention(
          jnp.stack([q, k, v], axis=2), lam, interpret=False),
      "xla": lambda q, k, v: attention_kernel.reference(
          q, k, v, lam).astype(q.dtype)}
  tokamax = xent_kernel._tokamax()  # pylint: disable=protected-access
  if tokamax:
    absl_flags.FLAGS.tokamax_cross_compile = True
    for impl in ("triton", "mosaic", "xla"):
      impls[f"tokamax_{impl}"] = functools.partial(
          lambda q, k, v, impl: tokamax.dot_product_attention(
              q, k, v, is_causal=True, scale=1 / lam, implementation=impl),
          impl=impl)
  arg = jax.ShapeDtypeStruct((members, batch, seq, 1, head_dim), jnp.bfloat16,
                             sharding=jax.NamedSharding(mesh, jax.P()))
  out = {}
  for name, f in impls.items():
    loss = lambda q, k, v, f=f: jnp.sum(
        jax.vmap(f)(q, k, v).astype(jnp.float32) ** 2)
    try:
      with jax.set_mesh(mesh):
        text = jax.jit(jax.value_and_grad(loss, (0, 1, 2))).lower(
            arg, arg, arg).compile().as_text()
    except Exception as e:  # pylint: disable=broad-except
      out[name] = f"failed: {type(e).__name__}: {str(e)[:160]}"
      continue
    out[name] = trace_summary.describe_kernels(
        trace_summary.entry_kernels(text))
  return out


def hlo_bytes(shape: str) -> int:
  """Bytes of an HLO shape string (a tuple's summed)."""
  size = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "pred": 1, "f16": 2}
  return sum(size.get(t, 4) * int(np.prod([int(x) for x in dims.split(",")
                                           if x] or [1]))
             for t, dims in re.findall(r"(\w+)\[([\d,]*)\]", shape))


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--settings", default=xent_kernel.DEFAULT_BLOCKS)
  p.add_argument("--d_model", type=int, default=128,
                 help="the loss's d (Figs. 8-10: 32)")
  p.add_argument("--step", default="",
                 help="a bench/gpu_paper.py path: its step's HLO too")
  p.add_argument("--step_figs", default="6",
                 help="--step: the figures whose sweep's step to compile "
                 "(e.g. 8,10: one and six layers at d = 32)")
  p.add_argument("--set", default="",
                 help="--step: config overrides on top of the path's "
                 "(K=V,...; e.g. model.attention_impl=xla)")
  p.add_argument("--attention", default="",
                 help="head widths (e.g. 32,128): the kernels of the causal "
                 "attention's forward and backward by implementation")
  p.add_argument("--tfds_dir", default=".gpudata/tfds")
  p.add_argument("--out", default="runs/deviceless")
  flags = p.parse_args()
  os.makedirs(flags.out, exist_ok=True)
  log = os.path.abspath(os.path.join(flags.out, "ptxas.log"))
  os.environ["PATH"] = ptxas_logger(log) + os.pathsep + os.environ["PATH"]
  ptxas = subprocess.run([shutil.which("ptxas"), "--version"],
                         capture_output=True, text=True, check=False)
  print(f"jax {jax.__version__}; H100 (compile only); d {flags.d_model}; "
        f"{ptxas.stdout.strip().splitlines()[-1] if ptxas.stdout else ''}")
  mesh = h100_mesh("x")
  print(f"\n{'setting':38s} {'kernel':{KERNEL_W}s} registers  spill bytes  "
        + "  ".join(name for name, _ in _PTX_COUNTS))
  for spec in filter(None, flags.settings.split(",")):
    try:
      report = compile_loss(mesh, spec, log, d=flags.d_model)
    except Exception as e:  # pylint: disable=broad-except
      print(f"{spec:38s} failed: {type(e).__name__}: {str(e)[:200]}")
      continue
    counts = kernel_instructions(report)
    for kernel, (regs, spill) in sorted(kernel_resources(report).items()):
      c = counts.get(kernel, {})
      print(f"{spec:38s} {kernel:{KERNEL_W}s} {regs:9d}  {spill:11d}  "
            + "  ".join(f"{c.get(name, '?'):>{len(name)}}"
                        for name, _ in _PTX_COUNTS)
            + ("  (spills)" if spill else ""), flush=True)
  for head_dim in filter(None, flags.attention.split(",")):
    for name, what in attention_kernels(mesh, int(head_dim)).items():
      print(f"attention D={head_dim} {name}: {what}", flush=True)
  for fig in filter(None, flags.step_figs.split(",") if flags.step else []):
    start = os.path.getsize(log) if os.path.exists(log) else 0
    text, jax_s, xla_s = step_hlo(flags.step, flags.tfds_dir, fig=int(fig),
                                  overrides=flags.set)
    with open(log) as f:
      f.seek(start)
      report = f.read()
    stem = flags.step + ("" if fig == "6" else f"_fig{fig}") + "".join(
        "_" + kv.split(".")[-1].replace("=", "-")
        for kv in filter(None, flags.set.split(",")))
    hlo = os.path.join(flags.out, f"{stem}.txt.gz")
    with gzip.open(hlo, "wt") as f:
      f.write(text)
    print(f"\n{stem}: Fig. {fig}'s step launches "
          + trace_summary.describe_kernels(trace_summary.loop_kernels(text)))
    print(f"{stem}: compiled by XLA in {xla_s:.1f} s (no autotuning), "
          f"after {jax_s:.1f} s of building, tracing and lowering")
    serialized = serialized_wgmma(report)
    for kernel, (regs, spill) in sorted(
        kernel_resources(report, layer_kernel).items()):
      print(f"{stem}: {kernel} {regs} registers, {spill} bytes spilled"
            + (", wgmma serialized (C7512)" if kernel in serialized else ""))
    fusions = trace_summary.hlo_fusions(text)
    print(f"{stem}: optimised HLO in {hlo}; the fusions writing the "
          "most bytes (a proxy for their HBM traffic):")
    top = collections.Counter({name: hlo_bytes(f.shape)
                               for name, f in fusions.items()})
    for name, size in top.most_common(8):
      print(f"  {size / 2**20:9.1f} MiB  {name}\n      = "
            f"{fusions[name].summary[:300]}")


if __name__ == "__main__":
  main()
