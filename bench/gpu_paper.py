r"""The paper's Sec. 7 + App. D on one GPU: probe, members curve, the sweeps.

  python bench/gpu_paper.py --tfds_dir DIR [--manual_dir WIKITEXT_DIR] \
      [--workdir runs/gpu_paper] [--stages probe,train,members,trace] \
      [--figs 6,7,8,9,10,11,12] [--steps 50000] [--time_budget_s 540]

Stages (each prints a table; all in one process, so ratios are comparable):

* probe: the Fig. 6 sweep (5 kappa2 members, d = 128, L = 1) trained for a
  few hundred steps by each path: "host" (today's: one step per call, batch
  built with numpy, float32 plain logits), then k = 250 steps per call with
  batches built on the device (`qkspec.training.multi_step`), in float32 and
  bfloat16, with the plain logits and with the fused chunked loss (also
  "_dv": its weight gradient accumulated as [d, V], "_bf16logits": its
  logits block in bfloat16, `model.loss_logits`, and "_looped": the
  members one after another inside the step, `sweep.member_batch=1`; not
  probed by default, name them in --paths; "scan_bf16_pallas": the loss as
  Pallas/Triton kernels that never write the logits, at the xent stage's
  setting; "scan_bf16_pallas_64x128x4x2" and "scan_bf16_pallas_fwddh":
  pinned settings, the session-6 default and its dh taken from the
  forward kernel). Prints
  compile seconds, steps/s, member-steps/s and the projected wall time of
  50,000 steps; the fastest path is used by the later stages (by the train
  and todo stages unless --train_path names another), and the
  training time of every run --figs, --seeds and --runs ask for is
  projected at its rate (`projection`).
* warm: compiles the programs of every run the train stage then trains
  (not yet finished) side by side on threads, into the persistent
  compilation cache WORKDIR/jax_cache (on in every stage), so that each
  run reads them instead of compiling its own when the last one ends
  (`warm`, `loop.compile_programs`). Since (19) the train stage prepares
  each next run while one trains (--prepare_next), which leaves warm
  little to do.
* train: the kappa2 sweep of every figure in --figs (7: Fig. 7's two
  members, configs/rho_training.py) for --steps steps with
  periodic evaluation, through `qkspec.training.loop` (resumable: rerunning
  with the same --workdir continues each run from its checkpoint). While a
  run trains, the next is built and compiled on a thread (`loop.prepare`;
  the first run too, before the next is begun), and a finished run's
  figures are drawn there (--noprepare_next: neither). When the time
  budget runs out, the run is stopped at a call boundary, its checkpoint
  saved (as Ctrl-C does) and the script says so; rerun to go on.
  Prints steps/s, wall time and each member's final valid perplexity,
  writes each run's figures (launch/plot_training.py); the loop's
  `run_info.jsonl` (device, precision, steps, wall time per invocation)
  feeds launch/report.py.
  `--seeds N --first_seed K` trains seeds K..K+N-1 as separate runs
  (`seed=S`: fig6, fig6_seed1, ...), which the report merges.
* train_fairseq: the same with fairseq's reading of kappa (`:fairseq`).
  `--contrast` adds a no-LocATER member (kappa1 = kappa2 = 0) per seed to
  the sweeps of Figs. 6, 8-12 (the configs' `contrast` argument);
  `--runs sweep,none` trains that member as a run of its own instead
  (`none`: one member, ~5x faster than the sweep, so both fit a slice).
* todo: the runs the report still lacks (--todo, default the committed
  reproduction/summary.json's "todo": REPRODUCTION.md's Still to run, one
  run per seed and kind, main text first), each trained only when its
  projected time (`run_seconds`) fits the time left, so a slice fills
  itself with what it can finish; --rate gives the Fig. 6 steps/s when no
  probe ran in the same call. With --both_readings (here and in train)
  a figure's and seed's sweeps under the two readings of kappa train as
  one program (`both_readings`: 10 members on the same batches, one
  compilation and evaluation schedule), or, where that does not fit the
  time left, as the two runs. Where a members curve of the run's model
  was measured on this path and device (members stage; --curves), the
  projection is that curve's, and --pack_seeds (default 3) trains seeds
  0..2 of each of Figs. 8-12 together, with a no-LocATER member per seed,
  where the curve says that costs at most PACK_GAIN x seed 0 alone
  (`fig8_both_c_seeds3`: 33 members), else seed 0 with its no-LocATER
  member as one more member of the sweep (`fig12_both_c`: 11 members),
  where that costs no more than the two runs apart (`pack_seeds`).
* plan: the projection that the probe prints (every run --figs, --seeds
  and --runs ask for; at the members curves of --path, or of
  --plan_device's kind, else at --rate), without probing: e.g. the whole
  section, `--stages plan --figs 6,8,9,10,11,12 --path
  scan_bf16_pallas_fa3 --plan_device "NVIDIA H200"`, on any machine.
* report: REPRODUCTION.md (+ reproduction/: summary CSV/JSON, figures,
  records/) in --workdir from every run there and every run the checkout's
  committed records hold (`qkspec.experiments.report`,
  `run_records`), so each slice leaves the whole report's verdicts and
  what is still to run, and its runs' records, small, to bring home.
* members: steps/s of N = 1, 5, 15, 30 members in one vmapped program, and
  the ratio to N times one member's rate (the issue's goal is >= 0.8 N),
  for the model of each figure in --members_figs (default 6: d = 128; 8:
  d = 32, where the loss's matmuls are 4x smaller and members may come
  cheaper, which decides whether --both_readings pays there; 12: its own
  six-layer model, whose runs then need no `deeper` guess). Each curve
  goes to WORKDIR/members_curves.json, by device kind, path and model, for
  the todo stage's projections in this call and, brought home and passed
  as --curves (default bench/members_curves.json), in later slices.
* xent: the loss alone (bench/xent_kernel.py): the chunked XLA loss against
  the Pallas kernels (`qkspec.training.pallas_xent`) at several block
  sizes, with each one's error against a float32 reference. The fastest
  accurate setting becomes `model.loss_pallas` of the later stages
  (unless --pallas names one).
* startup: one compiled call of the Fig. 6 sweep on the path (its log at
  step 0, then --k steps, an evaluation of both splits and a checkpoint:
  every program a run compiles) with `config.precompile` off, then on
  (bench/startup.py): the wall time and phases of each, and what
  compiling on threads while the state initialises saves a run.
* rate: steps/s of each --figs sweep (5 kappa2 members, one program) on
  --path, and its final train loss, under this process's XLA_FLAGS
  (bench/xla_flags_ab.py runs it once per setting: XLA reads its flags
  when a process starts).
* trace: a `jax.profiler` trace of 20 steps of each of --trace_paths
  (default: the host path and the fastest, "best") training the sweep of
  each of --trace_figs (default 6), as Perfetto JSON (summarise with
  bench/trace_summary.py).

On a CPU, --rehearse shrinks every stage to a few steps (same code path).
Python packages a GPU image may lack (tensorflow-datasets, grain,
array_record, ml_collections): see BUILD.md.
"""
import argparse
from concurrent import futures
import contextlib
import gc
import glob
import gzip
import json
import math
import os
import shutil
import signal
import sys
import threading
import time

from absl import logging
import jax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
# pylint: disable=g-import-not-at-top,wrong-import-position
from qkspec.config import args as config_args
from qkspec.experiments import report
from qkspec.experiments import report_plan
from qkspec.experiments import report_runs
from qkspec.experiments import run_records
from qkspec.experiments import training_plots
from qkspec.training import interrupt
from qkspec.training import loop
from qkspec.training import step as step_lib
from qkspec.training import sweep as sweep_lib
from qkspec.training import tasks
import startup
import xent_kernel

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIGS = {6: "L=1,d=128", 8: "L=1,d=32", 9: "L=3,d=32", 10: "L=6,d=32",
        11: "L=3,d=128", 12: "L=6,d=128",
        7: ""}    # configs/rho_training.py: kappa1 = 100, kappa2 = 1 vs none
PATHS = {   # name -> config overrides
    "host_f32_plain": {"steps_per_call": 1, "compute_dtype": "float32",
                       "model.fused_loss": False},
    "scan_f32_plain": {"compute_dtype": "float32",
                       "model.fused_loss": False},
    "scan_bf16_plain": {"compute_dtype": "bfloat16",
                        "model.fused_loss": False},
    "scan_bf16_fused4096": {"compute_dtype": "bfloat16",
                            "model.fused_loss": True,
                            "model.loss_chunk": 4096},
    "scan_bf16_fused4096_dv": {"compute_dtype": "bfloat16",
                               "model.fused_loss": True,
                               "model.loss_chunk": 4096,
                               "model.loss_kernel_grad": "dv"},
    "scan_bf16_fused4096_bf16logits": {"compute_dtype": "bfloat16",
                                       "model.fused_loss": True,
                                       "model.loss_chunk": 4096,
                                       "model.loss_logits": "compute"},
    "scan_bf16_fused4096_dv_bf16logits": {"compute_dtype": "bfloat16",
                                          "model.fused_loss": True,
                                          "model.loss_chunk": 4096,
                                          "model.loss_kernel_grad": "dv",
                                          "model.loss_logits": "compute"},
    "scan_bf16_fused4096_looped": {"compute_dtype": "bfloat16",
                                   "model.fused_loss": True,
                                   "model.loss_chunk": 4096,
                                   "sweep.member_batch": 1},
    "scan_bf16_fused1024": {"compute_dtype": "bfloat16",
                            "model.fused_loss": True,
                            "model.loss_chunk": 1024},
    "scan_bf16_pallas": {"compute_dtype": "bfloat16",
                         "model.fused_loss": True,
                         "model.loss_impl": "pallas"},
    # pinned settings (the xent stage's choice does not replace them): the
    # session-6 default, whose step ran at PALLAS_RATE, the same blocks
    # with dh taken from the forward kernel (pallas_xent.dh_in_forward),
    # and that forward from FlashAttention-3 (qkspec/training/
    # flash_forward.py; 4 vocabulary splits), and dW from it too
    # (flash_forward.weight_grad; 2 token groups)
    "scan_bf16_pallas_64x128x4x2": {"compute_dtype": "bfloat16",
                                    "model.fused_loss": True,
                                    "model.loss_impl": "pallas",
                                    "model.loss_pallas": "64x128x4x2"},
    "scan_bf16_pallas_fwddh": {"compute_dtype": "bfloat16",
                               "model.fused_loss": True,
                               "model.loss_impl": "pallas",
                               "model.loss_pallas":
                                   "64x128x4x2/fwd/64x128x4x2"},
    "scan_bf16_pallas_fa3": {"compute_dtype": "bfloat16",
                             "model.fused_loss": True,
                             "model.loss_impl": "pallas",
                             "model.loss_pallas":
                                 "64x128x4x2x4/fa3/64x128x4x2"},
    "scan_bf16_pallas_fa3dw": {"compute_dtype": "bfloat16",
                               "model.fused_loss": True,
                               "model.loss_impl": "pallas",
                               "model.loss_pallas":
                                   "64x128x4x2x4/fa3/fa3x2"},
}
# fa3dw with fewer kernels a layer: the attention as one fused kernel
# (qkspec/training/attention_kernel.py) and q, k, v as one matmul; and
# Post-LN's residual sum, dropout and LayerNorm as one kernel too
# (qkspec/training/norm_kernel.py)
PATHS["scan_bf16_pallas_fa3dw_attn"] = dict(
    PATHS["scan_bf16_pallas_fa3dw"], **{"model.attention_impl": "pallas",
                                        "model.fused_qkv": True})
PATHS["scan_bf16_pallas_fa3dw_fused"] = dict(
    PATHS["scan_bf16_pallas_fa3dw_attn"], **{"model.fused_norm": True})
# and each sublayer's last matmul in its norm's kernel: the FFN
# (qkspec/training/ffn_kernel.py), the attention's output projection
# (proj_norm_kernel.py); and q, k, v in the attention's kernel too
# (qkv_attention_kernel.py)
PATHS["scan_bf16_pallas_fa3dw_norms"] = dict(
    PATHS["scan_bf16_pallas_fa3dw_fused"], **{"model.fused_ffn": True,
                                              "model.fused_out_proj": True})
PATHS["scan_bf16_pallas_fa3dw_sublayer"] = dict(
    PATHS["scan_bf16_pallas_fa3dw_norms"],
    **{"model.fused_qkv_attention": True})
T0 = time.time()


def log(msg):
  print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


def left(flags) -> float:
  return flags.time_budget_s - (time.time() - T0)


_load_lm_data = tasks.load_lm_data
_DATA = {}
_DATA_LOCK = threading.Lock()


def _load_once(config):
  """tasks.load_lm_data, read once per process (every probe builds a task;
  the warm stage's threads each build one)."""
  key = (config.data.name, config.data.manual_dir, config.data.data_dir,
         config.data.seed)
  with _DATA_LOCK:
    if key not in _DATA:
      _DATA[key] = _load_lm_data(config)
    return _DATA[key]


tasks.load_lm_data = _load_once


def fig_config(flags, fig: int, path: str, **extra):
  """configs/depth_width.py (rho_training.py for Fig. 7) for `fig`, with
  the data dirs and `path`."""
  arg = ",".join([FIGS[fig]] * bool(FIGS[fig])
                 + [f"{k}={v}" for k, v in extra.items()])
  name = "rho_training.py" if fig == 7 else "depth_width.py"
  c = config_args.load_config_file(os.path.join(ROOT, "configs", name),
                                   arg or None)
  c.data.manual_dir = flags.manual_dir
  c.data.data_dir = flags.tfds_dir
  c.num_steps = flags.steps
  c.update_from_flattened_dict(PATHS[path])
  if _pallas_of(flags, path):
    c.model.loss_pallas = flags.pallas
  if "steps_per_call" not in PATHS[path]:
    c.steps_per_call = flags.k
  if flags.rehearse:       # a few steps per stage, the same code path
    c.log_every, c.eval_every, c.checkpoint_every = 2, 4, 4
    c.eval_max_batches = 2
  return c


def _pallas_of(flags, path: str) -> str:
  """--pallas where it sets `path`'s Pallas blocks (an unpinned Pallas
  path), else ""."""
  pinned = "model.loss_pallas" in PATHS[path]
  return ("" if pinned or PATHS[path].get("model.loss_impl") != "pallas"
          else flags.pallas)


def _stepper(config):
  """(fresh state, call(state, i) -> (state, loss) after call i, k).

  `call.aot(state)` compiles call 0's program ahead of time and returns a
  call that runs that compiled program, with `.as_text()` its optimised
  HLO (one compile for both the trace and the HLO)."""
  steps = step_lib.build_steps(config)
  ik, dk, hp = step_lib.member_inputs(sweep_lib.members(config),
                                      sweep_lib.is_sweep(config))
  dk = jax.device_put(dk, steps.replicated)
  k, feed = steps.steps_per_call, steps.task.feed
  fn = steps.train_many if k > 1 else steps.train

  def args(state, i):
    if k > 1:
      return state, feed.consts, feed.train_inputs(i * k, k), dk
    return state, steps.task.train_batch(i), dk

  def loss_of(metrics):
    """The train loss of the call's last step, members averaged."""
    return (metrics["loss"][-1] if k > 1 else metrics["loss"]).mean()

  def make_call(program):
    def run(state, i):
      state, metrics = program(*args(state, i))
      return state, loss_of(metrics)
    return run

  call = make_call(fn)

  def aot(state):
    compiled = fn.lower(*args(state, 0)).compile()
    run = make_call(compiled)
    run.as_text = compiled.as_text
    return run
  call.aot = aot
  return steps.init(ik, hp), call, k


def timed_rate(config, calls: int):
  """(compile s, steps/s, steps per call, final train loss), loop-free."""
  state, call, k = _stepper(config)
  t = time.perf_counter()
  state, _ = jax.block_until_ready(call(state, 0))
  compile_s = time.perf_counter() - t
  state, _ = jax.block_until_ready(call(state, 1))    # a warm call
  t = time.perf_counter()
  for i in range(2, 2 + calls):
    state, loss = call(state, i)
  state, loss = jax.block_until_ready((state, loss))
  rate = calls * k / (time.perf_counter() - t)
  del state
  gc.collect()
  return compile_s, rate, k, float(loss)


PROBED = {}      # path -> the probe's Fig. 6 steps/s, this process


def try_rate(flags, c, what: str):
  """`timed_rate` of config `c` over --probe_steps steps, or None, with
  `what`'s failure logged, where it does not compile or run."""
  calls = max(1, flags.probe_steps // max(c.steps_per_call, 1))
  try:
    return timed_rate(c, calls)
  except Exception as e:  # pylint: disable=broad-except
    log(f"{what}: failed: {type(e).__name__}: {str(e)[:300]}")
    return None


def rates(flags, path: str):
  """The rate stage: each --figs sweep timed as the probe times Fig. 6's
  (`timed_rate`), a line each (bench/xla_flags_ab.py reads them), and
  kept in WORKDIR's members curves as its model's point at a sweep's
  members (`save_curve`), for the projections of a section that trains
  on this path (bench/gpu_ab_section.sh: each setting of the A/B in a
  WORKDIR of its own, since the key has no XLA_FLAGS)."""
  for fig in (int(f) for f in flags.figs.split(",")):
    timed = try_rate(flags, fig_config(flags, fig, path), f"rate fig{fig}")
    if timed is None:
      continue
    compile_s, rate, _, loss = timed
    save_curve(flags, path, model_of(fig), {run_members(fig, "sweep"): rate})
    log(f"rate fig{fig} ({model_of(fig)}, {path}): compile {compile_s:.1f} "
        f"s, {rate:.1f} steps/s; loss {loss:.6g}; XLA_FLAGS "
        f"{os.environ.get('XLA_FLAGS') or '(none)'}")


def probe(flags) -> str:
  """Times each path; the fastest whose loss agrees is used next.

  Paths with the same steps per call train the same steps on the same
  batches, so their final train losses must agree (bf16 within 2% of
  float32, tests/precision_test.py): a path off by more (a kernel wrong on
  this GPU, say) is reported and never chosen.
  """
  log("probe: the Fig. 6 sweep (5 members, d=128, L=1) by each path")
  rows, best, best_rate, ref = [], None, 0.0, {}
  for path in flags.paths.split(","):
    timed = try_rate(flags, fig_config(flags, 6, path), f"probe {path}")
    if timed is None:
      continue
    compile_s, rate, k, loss = timed
    ref.setdefault(k, (path, loss))
    off = abs(loss - ref[k][1]) / abs(ref[k][1])
    agrees = math.isfinite(loss) and off <= 0.02
    rows.append((path, compile_s, rate, loss, agrees))
    PROBED[path] = rate
    log(f"probe {path}: k={k} compile {compile_s:.1f} s, {rate:.1f} steps/s"
        f" ({5 * rate:.0f} member-steps/s), 50,000 steps in "
        f"{50_000 / rate / 60:.2f} min; loss {loss:.4f}"
        + ("" if agrees else f": DISAGREES with {ref[k][0]} "
           f"({ref[k][1]:.4f}); not chosen"))
    if path != "host_f32_plain" and agrees and rate > best_rate:
      best, best_rate = path, rate
  base = dict((r[0], r[2]) for r in rows).get("host_f32_plain")
  print("\nprobe (Fig. 6 sweep, 5 members)    compile_s  steps/s  x host"
        "  min/50k  train loss", flush=True)
  for path, compile_s, rate, loss, agrees in rows:
    ratio = f"{rate / base:6.2f}" if base else "     -"
    print(f"  {path:32s} {compile_s:8.1f} {rate:8.1f} {ratio}"
          f" {50_000 / rate / 60:8.2f}  {loss:10.4f}"
          + ("" if agrees else "  (disagrees)"), flush=True)
  log(f"fastest path: {best}")
  if best_rate:
    log(projection(flags, best_rate, best))
  return best or "scan_f32_plain", best_rate


ONE_MEMBER_RATE, FIVE_MEMBER_RATE = 534.1, 115.8   # H100 (gpu_results.md)
# The Fig. 6 sweep's steps/s on the fastest path, scan_bf16_pallas with the
# default Pallas blocks (H100, gpu_results.md (4)): --rate's default.
PALLAS_RATE = 223.3


def projection(flags, rate: float, path: str) -> str:
  """The wall time of every run that --figs, --seeds and --runs ask for
  (`run_seconds` at the members curves measured on `path` where there are
  any, else at `rate`, the probe's Fig. 6 steps/s), the steps alone, and
  each figure's share."""
  figs = [int(f) for f in flags.figs.split(",")]
  kinds = flags.runs.split(",")
  runs = [(f, k) for f in figs for k in kinds if not (f == 7 and k == "none")]
  curves = load_curves(flags, path)
  wall, steps, by_fig = 0.0, 0.0, {}
  for f, k in runs:
    curve = curve_for(curves, f)
    w = flags.seeds * run_seconds(f, k, flags.steps, rate, flags.contrast,
                                  1, 1, *curve)
    wall += w
    steps += flags.seeds * flags.steps * run_step_seconds(
        f, k, rate, flags.contrast, 1, 1, *curve)
    by_fig[f] = by_fig.get(f, 0.0) + w
  sweeps = flags.seeds * sum(k == "sweep" for _, k in runs)
  nones = flags.seeds * sum(k == "none" for _, k in runs)
  return (f"projected: {sweeps} sweep and {nones} no-LocATER runs of "
          f"{flags.steps:,} steps (--figs {flags.figs}, --seeds "
          f"{flags.seeds}, --runs {flags.runs}): ~{wall / 60:.1f} min, of "
          f"which steps {steps / 60:.1f} and evaluation, compilation and "
          f"setup {(wall - steps) / 60:.1f}, at "
          + (f"the members curves measured at {'; '.join(sorted(curves))}"
             " (`deeper` for the layers they lack)" if curves
             else f"{rate:.1f} Fig. 6 steps/s")
          + _budget_left(flags) + "; by figure: "
          + ", ".join(f"{f} {w / 60:.1f}" for f, w in by_fig.items())
          + lanes_text(by_fig, getattr(flags, "lanes", "")))


# Two lanes through MPS on the H200 did 1.24 times one GPU's work a second
# in bench/gpu_results.md (16) (Fig. 12 at 0.54 of its alone rate beside
# Fig. 11 at 0.71), 1.04-1.16 at (19)'s fewer kernels a step (Fig. 10 at
# 0.39 beside Fig. 8 at ~0.77, Fig. 12 at 0.48 beside Fig. 11).
LANES_OVERLAP = 1.1


def lanes_text(by_fig: dict[int, float], lanes: str) -> str:
  """What `projection` adds for --lanes ("6,11,12/8,9,10": figures that
  train side by side, one process each, bench/gpu_section.sh): each lane's
  projected minutes and the section's between the longest lane (were the
  lanes to overlap fully) and their sum (not at all: the GPU time-slices
  between processes, CUDA's default, and each only fills the other's idle
  gaps), and at the overlap measured (`LANES_OVERLAP`); "" without
  lanes."""
  if not lanes:
    return ""
  each = [sum(by_fig.get(int(f), 0.0) for f in lane.split(","))
          for lane in lanes.split("/")]
  measured = max(max(each), sum(each) / LANES_OVERLAP)
  return (f"; in lanes {' | '.join(lanes.split('/'))}: "
          f"{' | '.join(f'{w / 60:.1f}' for w in each)} min, so the "
          f"section ~{max(each) / 60:.1f} min if they overlap fully, "
          f"~{sum(each) / 60:.1f} if not at all, ~{measured / 60:.1f} at "
          f"the {LANES_OVERLAP:g}x two MPS lanes gave on the H200")


def _budget_left(flags) -> str:
  """", N min left in the budget", or "" without a --time_budget_s."""
  return (f", {left(flags) / 60:.1f} min left in the budget"
          if flags.time_budget_s < 1e8 else "")


def members_curve(flags, path: str, known: dict[int, float], fig: int = 6):
  """{N: steps/s} for N = 1, 5, 15, 30 members of Fig. `fig`'s model, as
  far as the time budget reaches (`known`: rates measured already;
  --rehearse: N = 1, 5, since on a CPU the Pallas path runs in Pallas'
  interpreter, minutes per program)."""
  log(f"members: steps/s of N members of Fig. {fig}'s model ({FIGS[fig]}) "
      f"in one program ({path})")
  rows = []
  for n in (1, 5) if flags.rehearse else (1, 5, 15, 30):
    if n in known:
      rows.append((n, known[n]))
      log(f"members N={n}: {known[n]:.1f} steps/s (from the probe)")
      continue
    if left(flags) < 60:
      log(f"members: N={n} skipped (time budget)")
      break
    c = fig_config(flags, fig, path)
    if n == 1:
      c.sweep.kappa2 = ()
    else:
      c.sweep.seed = tuple(range(n // 5))
      c.sweep.mode = "product"
    timed = try_rate(flags, c, f"members N={n}")
    if timed is None:
      break
    compile_s, rate, _, _ = timed
    rows.append((n, rate))
    log(f"members N={n}: compile {compile_s:.1f} s, {rate:.1f} steps/s")
  if rows and rows[0][0] == 1:
    one = rows[0][1]
    best = max(n * rate for n, rate in rows)
    print(f"\nmembers ({FIGS[fig]})  steps/s  member-steps/s  / (N x one "
          "member's; goal >= 0.8)  / most member-steps/s", flush=True)
    for n, rate in rows:
      print(f"  {n:5d} {rate:8.1f} {n * rate:12.0f} {rate / one:10.2f}"
            f" {n * rate / best:10.2f}", flush=True)
    log(f"members ({FIGS[fig]}): the GPU saturates at N = "
        f"{saturation(dict(rows))} (the fewest members within "
        f"{SATURATED:.0%} of the most member-steps/s measured)")
  return dict(rows)


SATURATED = 0.9


def saturation(curve: dict[int, float]) -> int:
  """The fewest members N of a curve {N: steps/s} whose member-steps/s
  N x rate reach SATURATED x the curve's most: where adding members stops
  paying (issue 10's goal 3 asks for >= 0.8 N x one member's rate up to
  that N)."""
  best = max(n * r for n, r in curve.items())
  return min(n for n, r in curve.items() if n * r >= SATURATED * best)


@contextlib.contextmanager
def deadline(seconds: float):
  """Sends this process SIGINT after `seconds`: the loop saves and stops."""
  timer = threading.Timer(max(seconds, 1.0),
                          lambda: os.kill(os.getpid(), signal.SIGINT))
  timer.start()
  try:
    yield
  finally:
    timer.cancel()


RUN_KINDS = ("sweep", "none")


def run_spec(fig: int, seed: int, kind: str, fairseq: bool,
             contrast: bool = False, both: bool = False, seeds: int = 1
             ) -> tuple[str, dict]:
  """(workdir name, config arguments) of one training run: fig6,
  fig6_fairseq_seed2, fig9_c, fig9_none, fig8_both, fig8_both_c_seeds3.
  `contrast` (a no-LocATER member added to the sweep) applies to the
  sweeps of Figs. 6, 8-12 only; `both` trains a sweep under both readings
  side by side (the configs' `both_readings`; a none run is the same under
  both); `seeds` > 1 trains seeds 0..seeds-1 in one program (`seed` then
  must be 0)."""
  if seeds > 1 and seed:
    raise ValueError(f"seeds={seeds} trains seeds 0..{seeds - 1}; got "
                     f"seed={seed} too")
  none = kind == "none"
  contrast = contrast and fig != 7 and not none
  both = both and not none
  fairseq = fairseq and not both
  seeds = seeds if seeds > 1 else 0
  extra = {"fairseq": fairseq, "both_readings": both, "contrast": contrast,
           "none": none, "seed": seed, "seeds": seeds}
  name = (f"fig{fig}" + "_fairseq" * fairseq + "_both" * both
          + "_c" * contrast + "_none" * none
          + (f"_seed{seed}" if seed else "")
          + (f"_seeds{seeds}" if seeds else ""))
  return name, {k: v for k, v in extra.items() if v}


def train_runs(flags) -> list[tuple[int, int, str]]:
  """(fig, seed, kind) of each run the train stage trains: every figure of
  --figs, seed from --first_seed on (--seeds) and kind of --runs (Fig. 7
  trains its none member anyway, so no none run of its own)."""
  return [(int(f), s, k) for f in flags.figs.split(",")
          for s in range(flags.first_seed, flags.first_seed + flags.seeds)
          for k in flags.runs.split(",") if not (k == "none" and f == "7")]


def warm(flags, path: str):
  """Compiles the programs of each run the train stage will train and has
  not finished (`train_runs`, read with --fairseq, --contrast and
  --both_readings as train reads them) side by side on threads
  (`loop.compile_programs`) into the persistent compilation cache
  (WORKDIR/jax_cache): each run then reads them instead of compiling its
  own after the last run ends, ~15-20 s a run on a GPU host (setup and
  compile, bench/gpu_results.md (14)). A run whose compile fails here
  compiles its own as before. Skipped, as train skips a run, where less
  than 30 s of the time budget is left."""
  if left(flags) < 30:
    log("warm: skipped (time budget)")
    return
  runs = []
  for fig, seed, kind in train_runs(flags):
    name, extra = run_spec(fig, seed, kind, flags.fairseq, flags.contrast,
                           flags.both_readings)
    if _steps_done(os.path.join(flags.workdir, name)) < flags.steps:
      runs.append((name, fig_config(flags, fig, path, **extra)))
  t = time.time()
  with futures.ThreadPoolExecutor(max(len(runs), 1),
                                  thread_name_prefix="warm") as pool:
    jobs = {name: pool.submit(loop.compile_programs, c) for name, c in runs}
  for name, job in jobs.items():
    if job.exception() is not None:
      log(f"warm {name}: failed: {type(job.exception()).__name__}: "
          f"{str(job.exception())[:300]}")
  log(f"warm: the programs of {len(runs)} run(s) compiled side by side in "
      f"{time.time() - t:.0f} s ({', '.join(jobs) or 'none to train'}; "
      f"path {path})")


def train(flags, path: str, rate: float | None = None) -> list[str]:
  """Trains each figure of --figs, one run per seed and kind of --runs
  (resumable), prints its finals, plots; `rate` (the probe's Fig. 6
  steps/s) projects each run's time. Returns the runs given up on
  (`train_resuming`). A run per seed, not `seeds=N`
  in one program: on the H100, 5 members give 579 member-steps/s and 15
  give 629 (bench/gpu_results.md, members), so separate runs cost ~8%, and
  each run then fits one GPU slice (checkpoints stay on the machine, so a
  run cut by the slice's end is lost unless resumed on the same lease).

  With --prepare_next each run is built and compiled on one thread
  (`prepare_run`), the first before the next is begun (its compilation
  then has the machine's cores to itself, the GPU waiting for it) and each
  next while the run before it trains; finished runs' figures are drawn
  on the same thread."""
  given_up, runs, ahead = [], train_runs(flags), {}
  with futures.ThreadPoolExecutor(1, thread_name_prefix="next") as pool:
    for i, (fig, seed, kind) in enumerate(runs):
      name, _ = run_spec(fig, seed, kind, flags.fairseq, flags.contrast,
                         flags.both_readings)
      if left(flags) < 30:
        log(f"train {name}: skipped (time budget)")
        continue
      # The first run (or one not prepared ahead) on the thread too, so
      # that the next, queued after it, does not share its compilation.
      if flags.prepare_next and i not in ahead:
        ahead[i] = pool.submit(prepare_run, flags, path, *runs[i])
      if (flags.prepare_next and i + 1 < len(runs)
          and left(flags) > PREPARE_MIN_S):
        ahead[i + 1] = pool.submit(prepare_run, flags, path, *runs[i + 1])
      if not train_run(flags, path, fig, seed, kind, flags.fairseq, rate,
                       flags.contrast, flags.both_readings,
                       prepared=ahead.pop(i, None),
                       plots=pool if flags.prepare_next else None):
        given_up.append(name)
  return given_up


# A lane prepares its next run only with this much of the time budget left
# at the start of the run before: a process exits only when the thread's
# compilation ends (~15-40 s on a GPU host).
PREPARE_MIN_S = 120


def prepare_run(flags, path: str, fig: int, seed: int, kind: str):
  """`loop.prepare` of the run `train_run` would train next (its config
  and workdir), or None if it is finished; run on `train`'s thread while
  the run before it trains."""
  name, extra = run_spec(fig, seed, kind, flags.fairseq, flags.contrast,
                         flags.both_readings)
  c = fig_config(flags, fig, path, **extra)
  workdir = os.path.join(flags.workdir, name)
  if _steps_done(workdir) >= c.num_steps:
    return None
  return loop.prepare(c, workdir)


def train_run(flags, path: str, fig: int, seed: int, kind: str,
              fairseq: bool, rate: float | None, contrast: bool = False,
              both: bool = False, seeds: int = 1,
              prepared: futures.Future | None = None,
              plots: futures.Executor | None = None) -> bool:
  """Trains one run (resumable from its workdir) until done or the time
  budget, then prints its finals and writes its figures; `contrast` adds
  a no-LocATER member to a sweep of Figs. 6, 8-12, `both` trains both
  readings side by side, `seeds` > 1 seeds 0..seeds-1 together;
  `prepared`: a `prepare_run` future for this run (one that failed is
  said, and the run builds its own); `plots`: draws the figures there
  (a thread), not before returning. False: given up on (a step not
  finite after --nan_retries)."""
  name, extra = run_spec(fig, seed, kind, fairseq, contrast, both, seeds)
  c = fig_config(flags, fig, path, **extra)
  workdir = os.path.join(flags.workdir, name)
  log(f"train {name}: {FIGS[fig] or 'rho_training'}, {c.num_steps} "
      f"steps, path {path}")
  curve, measured, layer_s = curve_for(load_curves(flags, path), fig)
  if rate or curve:
    need = run_seconds(fig, kind, c.num_steps - _steps_done(workdir), rate,
                       "contrast" in extra, 2 if "both_readings" in extra
                       else 1, seeds, curve, measured, layer_s)
    log(f"train {name}: ~{need / 60:.1f} min at "
        + (f"the members curve measured at {measured}" if curve
           else f"the probe's {rate:.1f} steps/s") + " (run_seconds)"
        + _budget_left(flags)
        + ("" if need < left(flags) - 30 else
           ": it will stop early; rerun at once on this machine to resume "
           "(its checkpoint stays here)"))
  t, finite, run = time.time(), True, None
  if prepared is not None:
    try:
      run = prepared.result()
    except Exception as e:  # pylint: disable=broad-except
      log(f"train {name}: preparing it ahead failed ({type(e).__name__}: "
          f"{str(e)[:300]}); it builds its own")
  try:
    with deadline(left(flags) - 15):
      finite = train_resuming(c, workdir, name, flags.nan_retries, run)
  except interrupt.Interrupted as e:
    log(f"train {name}: stopped by the time budget ({e}); rerun to go on")
  wall = time.time() - t
  log(f"train {name}: {_steps_done(workdir)} steps in {wall:.0f} s "
      f"({_last_phases(workdir)})")
  _print_finals(workdir)
  if plots is None:
    plot_run(workdir)
  else:
    plots.submit(plot_run, workdir)
  return finite


def plot_run(workdir: str) -> None:
  """A run's figures (`training_plots.plot_workdir`), logged."""
  try:
    paths = training_plots.plot_workdir(workdir)
    log(f"figures {os.path.basename(workdir)}: "
        f"{', '.join(os.path.basename(p) for p in paths)}")
  except Exception as e:  # pylint: disable=broad-except
    log(f"figures {os.path.basename(workdir)} failed: {type(e).__name__}: "
        f"{e}")


def train_resuming(c, workdir: str, name: str, retries: int,
                   prepared: loop.Run | None = None) -> bool:
  """`loop.train_and_evaluate(c, workdir)` (with `prepared`, its
  `loop.prepare` run, where given), resumed from the run's newest
  checkpoint up to `retries` times after a step that was not finite;
  False, with the error logged, when the last try fails too (the next run
  then goes on). On a GPU two runs of one config do not sum in the same
  order (`qkspec.experiments.replicates`), so a step that overflowed once
  may not again: bench/gpu_results.md (16), where a 5-member Fig. 12
  run's kappa2 = 0 member went NaN at step 29,927 and its rerun from the
  step-25,000 checkpoint went past it. On the CPU the rerun repeats the
  step exactly and fails the same way."""
  for attempt in range(retries + 1):
    try:
      loop.train_and_evaluate(c, workdir, prepared=prepared)
      return True
    except FloatingPointError as e:
      log(f"train {name}: {e} " + (
          f"Retrying from its newest checkpoint ({attempt + 1} of "
          f"{retries}, --nan_retries)." if attempt < retries else
          f"Giving the run up after {retries} retr"
          f"{'y' if retries == 1 else 'ies'}; the next run goes on."))
  return False


def todo(flags, path: str, rate: float | None) -> list[str]:
  """Trains the runs the report still lacks (--todo: a summary.json with
  `report_plan.todo_runs`' list, in its order), each only when its projected
  time (`run_seconds` at the members curves measured on this path, else
  at `rate`, else --rate) fits the time left: a run that would not is
  skipped for a later, shorter one, so no slice starts what it cannot
  finish (checkpoints do not come back from the device); a packed entry
  (`pair_readings`, `pack_seeds`) that does not fit gives way to its
  parts. Runs finished in an earlier call on this machine are skipped, and
  a packed entry one of whose parts an earlier call here trained (or
  began) gives way to its parts, so that part is not trained twice.
  Returns the runs given up on (`train_resuming`)."""
  with open(flags.todo) as f:
    runs = json.load(f).get("todo", [])
  if flags.both_readings:
    runs = pair_readings(runs)
  rate = rate or flags.rate
  curves = load_curves(flags, path)
  seconds = lambda r, steps=flags.steps: run_seconds(  # noqa: E731
      int(r["figure"]), r["kind"], steps, rate, r.get("contrast", False),
      _readings(r), r.get("seeds", 1),
      *curve_for(curves, int(r["figure"])))
  runs = pack_seeds(runs, flags.pack_seeds, seconds)
  total = sum(seconds(r) for r in runs)
  log(f"todo: {len(runs)} run{'s' * (len(runs) != 1)} still to train "
      f"({flags.todo}), ~"
      f"{total / 60:.0f} min in all at "
      + (f"the members curves measured at {'; '.join(sorted(curves))} "
         "and " if curves else "")
      + f"{rate:.1f} Fig. 6 steps/s" + ("" if rate != flags.rate
                                        else " (--rate)")
      + _budget_left(flags))
  trained, queue, given_up = 0, list(runs), []
  while queue:
    r = queue.pop(0)
    name, spec = _todo_spec(r)
    steps = flags.steps - _steps_done(os.path.join(flags.workdir, name))
    if steps <= 0:
      log(f"todo {name}: done here already")
      continue
    started = [p for p in r.get("parts", []) if _started(flags, p)]
    if started:         # an earlier call here trained a part: not it again
      log(f"todo {name}: {', '.join(_todo_spec(p)[0] for p in started)} "
          "trained here already; its parts instead")
      queue[:0] = r["parts"]
      continue
    need = seconds(r, steps)
    if need > left(flags) - TODO_MARGIN_S:
      parts = r.get("parts", [])
      log(f"todo {name}: ~{need / 60:.1f} min, does not fit "
          f"({left(flags) / 60:.1f} min left); "
          + (f"its parts instead: {', '.join(_todo_spec(p)[0] for p in parts)}"
             if parts else "skipped"))
      queue[:0] = parts
      continue
    t = time.time()
    try:                  # one failed run must not end the slice
      if train_run(flags, path, **spec, rate=rate):
        trained += 1
      else:
        given_up.append(name)
    except Exception as e:  # pylint: disable=broad-except
      log(f"todo {name}: failed: {type(e).__name__}: {str(e)[:300]}")
    measured = curve_for(curves, spec["fig"])[1]
    log(f"todo {name}: {(time.time() - t) / 60:.1f} min, projected "
        f"{need / 60:.1f} (run_seconds' model: "
        + (f"members curve measured at {measured}" if measured
           else "members") + ", deeper, EVAL_COST)")
  log(f"todo: trained {trained} of {len(runs)} runs")
  return given_up


def _started(flags, r: dict) -> bool:
  """Did an earlier call on this machine train (or begin) todo entry `r`
  or any of its parts?"""
  return bool(_steps_done(os.path.join(flags.workdir, _todo_spec(r)[0]))
              or any(_started(flags, p) for p in r.get("parts", [])))


def _todo_spec(r: dict) -> tuple[str, dict]:
  """(workdir name, `train_run` arguments) of a todo entry."""
  spec = dict(fig=int(r["figure"]), seed=int(r["seed"]), kind=r["kind"],
              fairseq=r["reading"] == "summed_loss",
              both=r["reading"] == "both",
              contrast=r.get("contrast", False), seeds=r.get("seeds", 1))
  return run_spec(**spec)[0], spec


def pair_readings(runs: list[dict]) -> list[dict]:
  """`runs` (todo entries) with each sweep wanted under both readings for
  the same figure and seed merged into one entry, reading "both" (one
  program, `both_readings`), where the first of the two stood; its
  "parts" are the two entries, for a slice it does not fit."""
  sweeps = {}                   # (figure, seed) -> its sweep entries
  for r in runs:
    if r["kind"] == "sweep":
      sweeps.setdefault((r["figure"], r["seed"]), []).append(r)
  out, merged = [], set()
  for r in runs:
    key = (r["figure"], r["seed"])
    if r["kind"] != "sweep" or len({x["reading"] for x in sweeps[key]}) < 2:
      out.append(r)
    elif key not in merged:
      merged.add(key)
      out.append(dict(r, reading="both", parts=sweeps[key]))
  return out


# A figure the report wants with one seed (Figs. 8-12; the issue asks for
# 3 "where GPU time allows") trains seeds 0..S-1 in one program when that
# is projected to cost at most PACK_GAIN x its seed-0 runs: on a model
# whose step is bound by fixed costs rather than its members (d = 32?
# bench/gpu_results.md), the extra seeds then come at half a run or less.
PACK_GAIN = 1.5
# ... and when it fits one device call (MAX_RUN_S, below): a run cut by a
# call's end is lost (its checkpoints stay on the machine), so a longer
# pack would never be trained; its parts are, one per call.


def pack_seeds(runs: list[dict], seeds: int, seconds) -> list[dict]:
  """`runs` (todo entries, after `pair_readings`) with the seed-0 sweep of
  each figure that `report_plan.PLAN` wants with one seed widened to seeds
  0..seeds-1 in one program, a no-LocATER member per seed beside the
  sweep (`contrast`), where `seconds(entry)` (projected wall seconds) says
  that costs at most PACK_GAIN x the sweep and the figure's seed-0
  no-LocATER entry (if listed) trained alone, and at most MAX_RUN_S (one
  call's time). Where the seeds do not pay (or `seeds` is 1) but that
  no-LocATER entry is listed, the sweep takes it as one more member
  (`contrast`, seed 0 only) where that costs no more than the two runs
  apart: on the members curves measured so far one member more in a
  program costs less than a program of its own, and it saves a run's
  compilation and evaluation (H200, Fig. 12's pair: ~6.5 min with it
  against 6.0 + 1.6 apart). The packed entry stands where the sweep stood, the
  no-LocATER entry goes, and both are its "parts", for a slice it does
  not fit."""
  nones = {r["figure"]: r for r in runs
           if r["kind"] == "none" and r["seed"] == 0}
  out, taken = [], set()
  for r in runs:
    fig = r["figure"]
    if (r["kind"] == "sweep" and r["seed"] == 0 and "seeds" not in r
        and report_plan.PLAN.get(fig) == 1
        and fig in report_plan.CONTRAST_FIGS):
      parts = [r] + ([nones[fig]] if fig in nones else [])
      apart = sum(seconds(p) for p in parts)
      packs = ([(dict(r, seeds=seeds, contrast=True, parts=parts),
                 PACK_GAIN * apart)] if seeds > 1 else [])
      if fig in nones:
        packs.append((dict(r, contrast=True, parts=parts), apart))
      fits = [p for p, bound in packs
              if seconds(p) <= min(MAX_RUN_S, bound)]
      if fits:
        out.append(fits[0])
        taken.add(fig)
        continue
    out.append(r)
  return [r for r in out if not (r["kind"] == "none" and r["seed"] == 0
                                 and r["figure"] in taken)]


def _readings(todo_entry: dict) -> int:
  return 2 if todo_entry["reading"] == "both" else 1


TODO_MARGIN_S = 45     # a run's figures, the report and the tarball
MAX_RUN_S = 540 - TODO_MARGIN_S   # a 10-minute call's --time_budget_s 540
# Projection model (H100, bench/gpu_results.md): steps/s of N members of
# the d = 128, L = 1 model is 534.1 at N = 1 and 115.8 at N = 5; a step's
# time taken as linear in N between them, scaled by the probe's Fig. 6
# rate; each layer beyond the first adds LAYER_COST of the one-layer step
# (its work: ~5% more FLOPs per layer at d = 128) and LAYER_S (its
# kernels' fixed cost, the same for any number of members: `deeper`); d =
# 32 costs as d = 128 (the step is bound by the [4096, V]
# logits, whose size does not depend on d); evaluation adds EVAL_COST
# (0.07 until evaluation became one program per split; 1.6-2.7% of the
# steps' time in (19)'s runs on the H200, Figs. 6, 8, 11 and 12,
# bench/gpu_results.md) and compilation RUN_OVERHEAD_S (Fig. 6: 8.0 min
# wall for 7.2 min of training on the H100; 8-19 s of setup, compilation,
# logs and checkpoints a fresh run in (19), before prepare-next).
# Where the members stage measured the curve of the run's model, or of its
# width at one layer, on this path and device, in this call or an earlier
# one (`load_curves`, `curve_for`), the step's time is that curve's instead
# (`step_seconds`; `deeper` then only for the layers the curve lacks),
# and no d = 32 guess is left. LAYER_S is measured (H200, 2026-11-27,
# scan_bf16_pallas_fa3, bench/gpu_results.md (11)): Fig. 9's no-LocATER
# run (L = 3, d = 32, one member) stepped 1.62 ms (81 s for 50,000 steps)
# against 0.730 ms at L = 1 (the members curve at N = 1), 0.445 ms a
# layer, of which LAYER_COST x 0.730 ms is its work; before, LAYER_COST =
# 0.10 alone projected that run at 1.1 min, and it took 1.6. A path whose
# curves hold a width at one layer and deeper takes its own LAYER_S, fitted
# to them (`layer_seconds`: fa3dw's Fig. 10 curve gives 0.415 ms, the
# fewer-kernels path's 0.069 ms, H200, bench/gpu_results.md (14)).
LAYER_COST = 0.05
LAYER_S = 0.41e-3
EVAL_COST = 0.03
RUN_OVERHEAD_S = 20.0


def run_members(fig: int, kind: str, contrast: bool = False,
                readings: int = 1, seeds: int = 1) -> int:
  """Members of one run: the kappa2 sweep (Fig. 7: its 2) per reading,
  plus a no-LocATER member if `contrast`, times `seeds`; a none run: 1."""
  if kind == "none":
    return 1
  return seeds * (1 + readings if fig == 7 else 5 * readings + contrast)


def step_seconds(curve: dict[int, float], n: int) -> float:
  """Seconds per step of `n` members, from a measured curve {N: steps/s}:
  piecewise linear in N between its points; beyond the largest N along
  the last segment (never below its time), below the smallest N that N's
  time (fewer members are never slower: an upper bound, so a slice never
  starts what it cannot finish). A curve of one point N (a sweep's rate,
  the rate stage's) gives past N its member-steps/s, the time growing as
  n / N (more members in one program never do fewer member-steps a
  second: an upper bound too)."""
  pts = sorted((k, 1 / r) for k, r in curve.items())
  if n <= pts[0][0]:
    return pts[0][1]
  if len(pts) == 1:
    return pts[0][1] * n / pts[0][0]
  i = min(sum(k <= n for k, _ in pts) - 1, len(pts) - 2)
  (n0, t0), (n1, t1) = pts[i], pts[i + 1]
  t = t0 + (t1 - t0) * (n - n0) / (n1 - n0)
  return max(t, t1) if n >= n1 else t


def run_step_seconds(fig: int, kind: str, rate: float,
                     contrast: bool = False, readings: int = 1,
                     seeds: int = 1, curve: dict[int, float] | None = None,
                     curve_model: str = "L=1",
                     layer_s: float = LAYER_S) -> float:
  """Projected seconds of one training step of a run (see the model
  above), given `rate`, the probe's steps/s of the Fig. 6 sweep, or
  `curve`, a members curve ({N: steps/s}) measured at `curve_model` (the
  run's model, or its width at one layer), which then replaces `rate` and
  the d = 32 guess; `readings` = 2: both readings side by side
  (`both_readings`); `seeds`: seeds in one program; `layer_s`: a layer's
  fixed seconds on this path (`layer_seconds`)."""
  members = run_members(fig, kind, contrast, readings, seeds)
  layers = _layers(model_of(fig))
  if curve:
    return deeper(step_seconds(curve, members), layers,
                  _layers(curve_model), layer_s)
  one, five = 1 / ONE_MEMBER_RATE, 1 / FIVE_MEMBER_RATE
  return deeper((one + (five - one) * (members - 1) / 4) * (
      FIVE_MEMBER_RATE / rate), layers, 1, layer_s)


def deeper(step_s: float, layers: int, measured_layers: int = 1,
           layer_s: float = LAYER_S) -> float:
  """Seconds of a step of the `layers`-layer model from `step_s`, that of
  the same members at `measured_layers`: each layer beyond the first adds
  LAYER_COST x the one-layer step and `layer_s` (the model above)."""
  one = (step_s - layer_s * (measured_layers - 1)) / (
      1 + LAYER_COST * (measured_layers - 1))
  return one * (1 + LAYER_COST * (layers - 1)) + layer_s * (layers - 1)


def layer_seconds(curves: dict[str, dict[int, float]]) -> float:
  """A path's fixed seconds a layer (`deeper`'s `layer_s`) fitted to its
  members curves: for each width measured at one layer and deeper (L = k)
  and each N both measured, the `layer_s` that carries the one-layer step
  onto the deeper one; the most of these (a fixed cost should not depend
  on N: the most keeps projections from falling short), never below 0.
  LAYER_S where no width has both."""
  fits = []
  for model, curve in curves.items():
    layers, width = _layers(model), model.split(",")[1]
    base = curves.get(f"L=1,{width}")
    if layers > 1 and base:
      fits += [(1 / curve[n] - (1 + LAYER_COST * (layers - 1)) / base[n])
               / (layers - 1) for n in set(curve) & set(base)]
  return max(max(fits), 0.0) if fits else LAYER_S


def run_seconds(fig: int, kind: str, steps: int, rate: float,
                contrast: bool = False, readings: int = 1, seeds: int = 1,
                curve: dict[int, float] | None = None,
                curve_model: str = "L=1", layer_s: float = LAYER_S) -> float:
  """Projected wall seconds of `steps` steps of one run: its steps
  (`run_step_seconds`, same arguments), evaluation (EVAL_COST) and
  compilation and setup (RUN_OVERHEAD_S)."""
  return steps * run_step_seconds(fig, kind, rate, contrast, readings,
                                  seeds, curve, curve_model, layer_s) * (
                                      1 + EVAL_COST) + RUN_OVERHEAD_S


def model_of(fig: int) -> str:
  """Fig. `fig`'s model, "L=3,d=32" (Fig. 7: locater_wt2's, Fig. 6's)."""
  return FIGS[fig] or FIGS[6]


def _layers(model: str) -> int:
  return int(model.split(",")[0].removeprefix("L="))


def curve_for(curves: dict[str, dict[int, float]], fig: int
              ) -> tuple[dict[int, float] | None, str, float]:
  """(members curve, the model it was measured at, the path's seconds a
  layer: `layer_seconds`) for Fig. `fig`'s runs: its own model's curve,
  else its width's at one layer; (None, "", ...) if neither was
  measured."""
  model, layer_s = model_of(fig), layer_seconds(curves)
  for m in (model, "L=1," + model.split(",")[1]):
    if m in curves:
      return curves[m], m, layer_s
  return None, "", layer_s


CURVES_FILE = "members_curves.json"


def _curves_key(flags, path: str) -> str:
  """The setting a curve was measured at: the path and its Pallas blocks."""
  pallas = _pallas_of(flags, path)
  return path + (f":{pallas}" if pallas else "")


def load_curves(flags, path: str) -> dict[str, dict[int, float]]:
  """Model ("L=1,d=32") -> {N: steps/s}: members curves measured on `path`
  (at the same Pallas setting) and this device kind, a curve of one
  point where only a sweep was timed (the rate stage), from --curves (a
  file brought home from a slice) and then WORKDIR's (this machine's
  earlier calls), the later file's curve replacing the earlier's. --plan_device
  names another device kind's curves (a slice's plan listed on a CPU).
  A model not measured on `path` takes its CURVES_STAND_IN path's curve."""
  device = flags.plan_device or jax.devices()[0].device_kind
  key = _curves_key(flags, path)
  out = (load_curves(flags, CURVES_STAND_IN[path])
         if path in CURVES_STAND_IN else {})
  for name in (flags.curves, os.path.join(flags.workdir, CURVES_FILE)):
    if name and os.path.isfile(name):
      with open(name) as f:
        for model, curve in json.load(f).get(device, {}).get(key,
                                                              {}).items():
          out[model] = {int(n): float(r) for n, r in curve.items()}
  return out


# A path's models whose members curves are not measured yet project their
# runs by those of a slower path: scan_bf16_pallas_fa3dw (dW from FA3)
# ran the Fig. 6 step 1.07x faster than scan_bf16_pallas_fa3 on the H200
# (bench/gpu_results.md (11)), so fa3's curves bound its runs from above.
# scan_bf16_pallas_fa3dw_attn and _fused (the same loss, a third and
# ~40% fewer kernels a layer, bench/gpu_results.md (13)) are projected as
# fa3dw until a slice times them; _fused's Figs. 10 and 12 sweeps were
# timed in (19) (their points in bench/members_curves.json, as the rate
# stage keeps them now), and _norms and _sublayer (fewer kernels still,
# (20)-(21)) are projected as _fused: not a bound, since their kernels
# are not timed yet.
CURVES_STAND_IN = {"scan_bf16_pallas_fa3dw": "scan_bf16_pallas_fa3",
                   "scan_bf16_pallas_fa3dw_attn": "scan_bf16_pallas_fa3dw",
                   "scan_bf16_pallas_fa3dw_fused": "scan_bf16_pallas_fa3dw",
                   "scan_bf16_pallas_fa3dw_norms":
                       "scan_bf16_pallas_fa3dw_fused",
                   "scan_bf16_pallas_fa3dw_sublayer":
                       "scan_bf16_pallas_fa3dw_fused"}


def save_curve(flags, path: str, model: str, curve: dict[int, float]):
  """Adds `curve` (measured at `model`, "L=1,d=32", on `path`) to
  WORKDIR's members_curves.json, {device kind: {`_curves_key`: {model:
  {N: steps/s}}}}, which runs.tgz brings home to replace --curves
  (bench/members_curves.json): the first curve saved in a workdir starts
  it from --curves, so it holds the earlier slices' curves too."""
  name = os.path.join(flags.workdir, CURVES_FILE)
  saved = {}
  for old in (flags.curves, name):
    if old and os.path.isfile(old):
      with open(old) as f:
        saved = json.load(f)
  device = jax.devices()[0].device_kind
  saved.setdefault(device, {}).setdefault(_curves_key(flags, path), {})[
      model] = {str(n): r for n, r in sorted(curve.items())}
  with open(name, "w") as f:
    json.dump(saved, f, indent=1)


def _last_phases(workdir: str) -> str:
  """The last invocation's wall time by phase (run_info.jsonl)."""
  last = report_runs.run_info_lines(workdir)[-1:]
  return (report_runs.phases_text(last) if last
          else "compilation and evaluation included")


def _steps_done(workdir: str) -> int:
  steps = [int(os.path.basename(p)) for p in glob.glob(
      os.path.join(workdir, "ckpt", "*")) if os.path.basename(p).isdigit()]
  return max(steps, default=0)


def _print_finals(workdir: str):
  members = training_plots.load_members(workdir)
  width = max([28] + [len(m.get("name", "?")) for m in members])
  for m in members:
    last = {k: v[-1][-1] for k, v in m["metrics"].items() if len(v[0])}
    get = lambda k: last.get(k, math.nan)  # noqa: E731
    print(f"  {m.get('name', '?'):{width}s} valid ppl {get('valid/ppl'):9.2f}  "
          f"test ppl {get('test/ppl'):9.2f}  scale "
          f"{get('mean/qk_scale'):.4g}  entropy {get('mean/entropy'):.4f}",
          flush=True)


def write_report(flags, committed: str = os.path.join(
    ROOT, "reproduction", "records")):
  """REPRODUCTION.md in --workdir from its runs and the `committed`
  records (see module docstring): the workdir's runs are recorded in its
  reproduction/records/, beside a copy of the committed ones, and replace
  those of the same name."""
  runs = sorted(os.path.dirname(p) for p in glob.glob(
      os.path.join(flags.workdir, "*", "members.json")))
  if not runs:
    log("report: no runs in the workdir yet")
    return
  out = os.path.join(flags.workdir, "REPRODUCTION.md")
  records = report.default_records_dir(out)
  if os.path.isdir(committed):
    shutil.copytree(committed, records, dirs_exist_ok=True)
  try:
    report.write_report(runs, out, records_dir=records,
                        replace_records=True)
  except Exception as e:  # pylint: disable=broad-except
    log(f"report failed: {type(e).__name__}: {e}")
    return
  log(f"report: {out} ({len(runs)} runs here, "
      f"{len(run_records.listed(records))} with the committed records); "
      f"their records: {records}/runs/; here, copy those into "
      "reproduction/records/runs/ and run `python launch/report.py`")


def trace(flags, path: str):
  """Perfetto traces of 20 steps (--rehearse: 2) of each of --trace_paths
  ("best": `path`, the probe's choice) training the sweep of each of
  --trace_figs, and each traced program's optimised HLO in
  WORKDIR/hlo/NAME.txt.gz (NAME: the path, "_figF" after it for a figure
  other than 6; small: it travels home in runs.tgz, where the traces do
  not), which bench/trace_summary.py reads beside the trace to say what
  each of the longest fusions computes and how busy the GPU was."""
  out = os.path.join(flags.workdir, "traces")
  steps = 2 if flags.rehearse else 20
  chosen = [path if p == "best" else p for p in flags.trace_paths.split(",")]
  for fig, p in ((int(f), p) for f in flags.trace_figs.split(",")
                 for p in dict.fromkeys(chosen)):
    name = p + (f"_fig{fig}" if fig != 6 else "")
    if left(flags) < 40:
      log(f"trace {name}: skipped (time budget)")
      return
    c = fig_config(flags, fig, p)
    if p != "host_f32_plain":
      c.steps_per_call = steps // 2
    state, call, k = _stepper(c)
    call = call.aot(state)      # the HLO below is this program's
    for i in range(2):
      state, _ = jax.block_until_ready(call(state, i))
    d = os.path.join(out, name)
    with jax.profiler.trace(d, create_perfetto_trace=True):
      for i in range(2, 2 + steps // k):
        state, _ = call(state, i)
      jax.block_until_ready(state)
    found = glob.glob(os.path.join(d, "**", "perfetto_trace.json.gz"),
                      recursive=True)
    if found:
      shutil.copy(found[0], os.path.join(out, f"{name}.json.gz"))
    log(f"trace {name}: "
        f"{found[0] if found else 'no perfetto trace written'}")
    hlo = os.path.join(flags.workdir, "hlo", f"{name}.txt.gz")
    os.makedirs(os.path.dirname(hlo), exist_ok=True)
    with gzip.open(hlo, "wt") as f:
      f.write(call.as_text())
    log(f"trace {name}: optimised HLO in {hlo}")
    del state
    gc.collect()


def _train_path(flags, path: str, known: dict) -> tuple[str, float | None]:
  """(path, its probed Fig. 6 steps/s or None) of the train and todo
  stages: --train_path where given, else the probe's choice."""
  if flags.train_path and flags.train_path != path:
    log(f"train and todo stages: --train_path {flags.train_path}, not "
        f"{path}")
    return flags.train_path, PROBED.get(flags.train_path)
  return path, known.get(5)


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--tfds_dir", required=True)
  p.add_argument("--manual_dir", default="")
  p.add_argument("--workdir", default="runs/gpu_paper")
  p.add_argument("--stages", default="probe,train,report,members")
  p.add_argument("--paths", default="host_f32_plain,scan_f32_plain,"
                 "scan_bf16_plain,scan_bf16_fused4096,scan_bf16_pallas",
                 help=f"probed paths, of {', '.join(PATHS)}")
  p.add_argument("--path", default="", help="skip the probe: use this path")
  p.add_argument("--train_path", default="",
                 help="train and todo stages: this path, whatever the probe "
                 "chose (a new kernel probed beside the runs' path)")
  p.add_argument("--figs", default="6")
  p.add_argument("--steps", type=int, default=50_000)
  p.add_argument("--seeds", type=int, default=1,
                 help="seeds per figure, one run each (seed=S configs)")
  p.add_argument("--first_seed", type=int, default=0,
                 help="train seeds first_seed .. first_seed + seeds - 1")
  p.add_argument("--pallas", default="",
                 help="model.loss_pallas for the Pallas path (BNxBVxWARPSx"
                 "STAGES); default: the xent stage's fastest accurate one")
  p.add_argument("--fairseq", action="store_true")
  p.add_argument("--runs", default="sweep",
                 help="runs per figure and seed: sweep (the kappa2 sweep) "
                 "and/or none (the no-LocATER member alone, the configs' "
                 "`none`), e.g. sweep,none")
  p.add_argument("--todo", default=os.path.join(ROOT, "reproduction",
                                                "summary.json"),
                 help="todo stage: the report summary whose 'todo' runs "
                 "to train (REPRODUCTION.md's Still to run)")
  p.add_argument("--rate", type=float, default=PALLAS_RATE,
                 help="todo stage without a probe in the same call: the "
                 "Fig. 6 sweep's steps/s on --path (the last probe's; "
                 "default: the H100's on scan_bf16_pallas)")
  p.add_argument("--contrast", action="store_true",
                 help="add a no-LocATER member per seed (Figs. 6, 8-12)")
  p.add_argument("--lanes", default="",
                 help="plan stage: the figures of --figs in groups that "
                 "train side by side, one process each (bench/"
                 "gpu_section.sh), e.g. 6,11,12/8,9,10: each group's "
                 "projected time and the section's bounds")
  p.add_argument("--plan_device", default="",
                 help="todo stage: project from this device kind's "
                 "members curves (e.g. 'NVIDIA H200'; default: this "
                 "machine's), so that --time_budget_s 0 lists a GPU "
                 "slice's plan on any machine")
  p.add_argument("--both_readings", action="store_true",
                 help="train and todo stages: each sweep under both "
                 "readings of kappa side by side in one program (the "
                 "configs' both_readings; todo: where both are still to "
                 "run for a figure and seed)")
  p.add_argument("--pack_seeds", type=int, default=3,
                 help="todo stage: train seeds 0..N-1 of a figure the "
                 "report wants with one seed (Figs. 8-12) in one program, "
                 "with a no-LocATER member per seed, where the measured "
                 "members curve projects it at most PACK_GAIN x that "
                 "figure's seed-0 runs (1: never; a sweep then still takes "
                 "its no-LocATER run as one more member where that is "
                 "cheaper than the two apart)")
  p.add_argument("--curves", default=os.path.join(ROOT, "bench",
                                                  CURVES_FILE),
                 help="members curves measured in an earlier slice "
                 "(WORKDIR/members_curves.json brought home), used by the "
                 "projections on the same path and device kind when "
                 "present; the members stage adds to WORKDIR's")
  p.add_argument("--members_figs", default="6",
                 help="members stage: the figures' models to time, e.g. "
                 "6,8 (d = 128 and d = 32, one layer); a deeper figure's "
                 "(12: L=6,d=128) then projects its runs without "
                 "the layer model (deeper)")
  p.add_argument("--xent_blocks", default=xent_kernel.DEFAULT_BLOCKS,
                 help="xent stage: the Pallas settings to time (default: "
                 "bench/xent_kernel.py's)")
  p.add_argument("--k", type=int, default=250, help="steps per call")
  p.add_argument("--probe_steps", type=int, default=500)
  p.add_argument("--time_budget_s", type=float, default=1e9)
  p.add_argument("--trace_paths", default="host_f32_plain,best",
                 help="trace stage: paths to trace; best = the probe's "
                 "choice (or --path)")
  p.add_argument("--trace_figs", default="6",
                 help="trace stage: the figures whose sweep to trace, e.g. "
                 "6,8 (8: d = 32, where one member's 50,000 steps took as "
                 "long as a d = 128 member's; is its GPU idle between "
                 "kernels?)")
  p.add_argument("--prepare_next", action=argparse.BooleanOptionalAction,
                 default=True,
                 help="train: build and compile the next run on a thread "
                 "while one trains, and draw a finished run's figures "
                 "there (`loop.prepare`; bench/gpu_results.md (19))")
  p.add_argument("--nan_retries", type=int, default=1,
                 help="a run whose step is not finite resumes from its "
                 "newest checkpoint this many times before it is given up "
                 "(a GPU's rerun does not sum in the same order)")
  p.add_argument("--rehearse", action="store_true",
                 help="CPU rehearsal: a few steps per stage")
  flags = p.parse_args()
  if flags.nan_retries < 0:
    p.error(f"--nan_retries must be >= 0, got {flags.nan_retries}")
  if flags.seeds < 1 or flags.first_seed < 0:
    p.error(f"--seeds must be >= 1 and --first_seed >= 0, got "
            f"{flags.seeds} and {flags.first_seed}")
  for name in ("members_figs", "trace_figs"):
    if not set(getattr(flags, name).split(",")) <= {str(f) for f in FIGS
                                                    if f != 7}:
      p.error(f"--{name} takes figures 6, 8-12 (one model each), got "
              f"{getattr(flags, name)!r}")
  if flags.lanes and sorted(flags.lanes.replace("/", ",").split(",")) != (
      sorted(flags.figs.split(","))):
    p.error(f"--lanes {flags.lanes} must group the figures of --figs "
            f"{flags.figs}, each once")
  if not set(flags.runs.split(",")) <= set(RUN_KINDS):
    p.error(f"--runs takes {', '.join(RUN_KINDS)}, got {flags.runs!r}")
  named = (flags.paths.split(",") + [flags.path, flags.train_path]
           + flags.trace_paths.split(","))
  unknown = sorted(set(named) - set(PATHS) - {"", "best"})
  if unknown:
    p.error(f"unknown path(s) {', '.join(unknown)}; known: {', '.join(PATHS)}")
  data_stages = {"probe", "warm", "train", "train_fairseq", "todo", "members",
                 "trace", "startup", "rate"} & set(flags.stages.split(","))
  if data_stages and not flags.manual_dir and not glob.glob(os.path.join(
      flags.tfds_dir, "wikitext2", "*", "dataset_info.json")):
    p.error(f"--tfds_dir {flags.tfds_dir} holds no prepared wikitext2, which "
            f"{', '.join(sorted(data_stages))} need: build it as BUILD.md "
            "says (\"A GPU machine without network access\") or pass "
            "--manual_dir (tfds would otherwise try to download it)")
  logging.set_verbosity(logging.INFO)    # the loop's progress and eval lines
  if flags.rehearse:       # a few steps per stage, training included
    flags.k, flags.probe_steps = 2, 2
    flags.steps = min(flags.steps, 8)
  os.makedirs(flags.workdir, exist_ok=True)
  # Compiled programs persist in WORKDIR/jax_cache (gpu_session.sh leaves
  # it out of runs.tgz): a run resumed or trained again on this machine,
  # and the runs the warm stage compiled for, read them.
  jax.config.update("jax_compilation_cache_dir",
                    os.path.join(flags.workdir, "jax_cache"))
  log(f"jax {jax.__version__}, devices {jax.devices()}")
  stages = flags.stages.split(",")
  path, known = flags.path or "scan_f32_plain", {}
  given_up = []      # runs not finite after --nan_retries: exits 1
  for stage in stages:                 # in the order given
    if stage == "probe":
      path, rate = probe(flags)
      known[5] = rate
    elif stage == "warm":
      warm(flags, _train_path(flags, path, known)[0])
    elif stage == "train":
      given_up += train(flags, *_train_path(flags, path, known))
    elif stage == "train_fairseq":     # the same figures, fairseq's reading
      flags.fairseq = True
      given_up += train(flags, *_train_path(flags, path, known))
      flags.fairseq = False
    elif stage == "todo":
      given_up += todo(flags, *_train_path(flags, path, known))
    elif stage == "members":
      for fig in (int(f) for f in flags.members_figs.split(",")):
        curve = members_curve(flags, path, known if fig == 6 else {}, fig)
        if len(curve) > 1:           # later projections use it
          save_curve(flags, path, model_of(fig), curve)
    elif stage == "report":
      write_report(flags)
    elif stage == "xent":            # later stages use its best setting
      shape = dict(n=128, d=32, v=1000, repeats=2) if flags.rehearse else {}
      best = xent_kernel.best_pallas(xent_kernel.run(
          blocks=flags.xent_blocks, **shape))
      if best and not flags.pallas:
        flags.pallas = best
      log(f"xent: Pallas setting for the next stages: "
          f"{flags.pallas or 'the default'}")
    elif stage == "plan":              # the projection alone, no probe
      log(projection(flags, known.get(5) or flags.rate, path))
    elif stage == "startup":
      startup.compare(
          lambda: startup.one_call(fig_config(flags, 6, path), flags.k),
          1, f"Fig. 6 sweep, one call of {flags.k} steps ({path})", log)
    elif stage == "trace":
      trace(flags, path)
    elif stage == "rate":
      rates(flags, path)
    else:
      raise SystemExit(f"unknown stage {stage!r}")
  log("done")
  if given_up:
    log(f"given up (not finite after --nan_retries {flags.nan_retries}): "
        f"{', '.join(given_up)}")
    sys.exit(1)


if __name__ == "__main__":
  main()
