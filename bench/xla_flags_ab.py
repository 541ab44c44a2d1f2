r"""Steps/s of the section's sweeps under XLA_FLAGS settings, A/B.

  python bench/xla_flags_ab.py [--settings default,off,graphs,cublas] \
      [--rounds 2] [--setting NAME=FLAGS ...] -- --tfds_dir .gpudata/tfds \
      --path scan_bf16_pallas_fa3dw_fused --figs 12,10

XLA reads XLA_FLAGS once, when a process starts its backend, so each
setting runs in a process of its own (`bench/gpu_paper.py --stages rate`
with the arguments after `--`); the rounds alternate the settings' order
(A B C, then C B A, ...) so that a drift of the machine falls on all of
them. Prints each process's steps/s per figure, then per figure and setting
the median, its ratio to the first setting's and whether the final train
loss agrees with it (within LOSS_RTOL: a setting that changes the numbers
is named, whatever its speed).

The settings are XLA's command buffers (CUDA graphs on an NVIDIA GPU):
bench/gpu_results.md (12) and (16) found the deep models' steps bound by
their kernels' count (~7 us each at d = 128; Fig. 12's step 355 kernels
then, 207 since (17)-(18)), the cost CUDA graphs cut by launching many
kernels at once.
- default: the XLA of this jax as it comes (in jax 0.7.2's, command
  buffers for runs of >= 5 fusions, cuBLAS, cuDNN and custom calls, but
  not for loops);
- off: none (each kernel launched by itself): what default saves;
- graphs: loops and conditionals too, and runs of any length, so that the
  k steps of a call (`lax.scan`) may become one CUDA graph.
- cublas: XLA's matmuls by cuBLAS rather than Triton (the deviceless
  compile, which cannot autotune, made every one a Triton GEMM fusion;
  without them an H100's Fig. 12 step was 290 kernels against 355 in
  (16), 208 against 207 at the end of (18), where the optimizer's kernels
  take in most split-K reductions), each weight gradient one call
  written in bf16 in place of a float32 split-K GEMM and its reduction:
  bench/gpu_results.md (16)-(18)).
`--setting NAME=FLAGS` adds another (named in --settings to run it), and
`--path_of NAME=PATH` has setting NAME train on another bench/gpu_paper.py
path (e.g. `--setting sublayer= --path_of
sublayer=scan_bf16_pallas_fa3dw_sublayer`: each sublayer's matmuls in
its kernels, against the shared `--path`), so one A/B weighs a code
path as it weighs flags. A
setting that fails (flags this jax does not know, a capture XLA cannot
do) is reported and the others go on; exits 1 if every process failed.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SETTINGS = {
    "default": "",
    "off": ("--xla_gpu_enable_command_buffer=-FUSION,-CUBLAS,-CUBLASLT,"
            "-CUSTOM_CALL,-CUDNN"),
    "graphs": ("--xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL "
               "--xla_gpu_graph_min_graph_size=1"),
    "cublas": "--xla_gpu_enable_triton_gemm=false",
}
# gpu_paper.CURVES_FILE (a test holds them equal; importing gpu_paper would
# load jax into this parent of the rate processes)
CURVES_FILE = "members_curves.json"
WIN_MARGIN = 0.05   # --winner_out: a setting must beat the first by 5%
LOSS_RTOL = 1e-2    # reruns differ a little on a GPU; a broken capture, not
_RATE = re.compile(r"rate fig(\d+) \(.*?\): compile ([\d.]+) s, ([\d.]+) "
                   r"steps/s; loss (\S+);")


def order(settings: list[str], rounds: int) -> list[str]:
  """The settings run by run: forwards, backwards, forwards, ..."""
  return [s for r in range(rounds)
          for s in (settings if r % 2 == 0 else settings[::-1])]


def command(name: str, rest: list[str], paths: dict[str, str],
            workdirs: str = "") -> list[str]:
  """The rate process of setting `name`: gpu_paper.py with the shared
  arguments `rest`, then `--path` of `paths` (--path_of) if it has one
  and, with `workdirs` (--setting_workdirs), `--workdir` `setting_workdir`
  (argparse keeps the last)."""
  return ([sys.executable, os.path.join(HERE, "gpu_paper.py"), "--stages",
           "rate", *rest] + (["--path", paths[name]] if name in paths else [])
          + (["--workdir", setting_workdir(workdirs, name)] if workdirs
             else []))


def setting_workdir(workdirs: str, name: str) -> str:
  """Setting `name`'s WORKDIR under --setting_workdirs: the rate stage
  keeps its rates there (members_curves.json), apart from the other
  settings' (their curves are keyed by path, not XLA_FLAGS)."""
  return os.path.join(workdirs, name)


def parse(output: str) -> dict[int, tuple[float, float]]:
  """fig -> (steps/s, final train loss) from a rate stage's lines."""
  return {int(m[1]): (float(m[3]), float(m[4]))
          for m in _RATE.finditer(output)}


def _of_fig(runs: list[tuple[str, dict]], settings: list[str], fig: int
            ) -> dict[str, list[tuple[float, float]]]:
  """(steps/s, loss) of each process that ran Fig. `fig`, by setting."""
  return {s: [r[fig] for name, r in runs if name == s and fig in r]
          for s in settings}


def _loss_offs(got: list[tuple[float, float]], ref_loss: float
               ) -> list[float]:
  """Each run's relative distance of its loss from `ref_loss`."""
  return [abs(loss - ref_loss) / abs(ref_loss) for _, loss in got]


def _agree(offs: list[float]) -> bool:
  """Whether every loss is within LOSS_RTOL (a NaN is not)."""
  return all(off <= LOSS_RTOL for off in offs)


def summarize(runs: list[tuple[str, dict]], settings: list[str]
              ) -> list[str]:
  """Lines per figure and setting: the median steps/s over its runs
  (`runs`: (setting, `parse` result) per process), the ratio to the first
  setting's median, and whether its losses agree with that setting's."""
  lines = []
  figs = sorted({f for _, r in runs for f in r})
  for fig in figs:
    got = _of_fig(runs, settings, fig)
    ref = got[settings[0]]
    ref_rate = statistics.median(x for x, _ in ref) if ref else None
    ref_loss = ref[0][1] if ref else None
    for s in settings:
      if not got[s]:
        lines.append(f"fig{fig} {s:>8}: no run finished")
        continue
      rate = statistics.median(x for x, _ in got[s])
      line = (f"fig{fig} {s:>8}: {rate:8.1f} steps/s (median of "
              f"{len(got[s])}: {', '.join(f'{x:.1f}' for x, _ in got[s])})")
      if ref_rate:
        line += f", x{rate / ref_rate:.3f} of {settings[0]}"
        offs = _loss_offs(got[s], ref_loss)
        line += ("" if _agree(offs) else
                 f"; its loss DISAGREES ({max(offs):.1%} off "
                 f"{settings[0]}'s)")
      lines.append(line)
  return lines


def winner(runs: list[tuple[str, dict]], settings: list[str], fig: int,
           margin: float = WIN_MARGIN) -> str:
  """The setting to run `fig` under: the fastest (median steps/s) whose
  loss agrees with the first setting's and whose median beats the first's
  by at least `margin` (0.05: 5% faster); else the first setting (also
  when it never finished: nothing to compare with)."""
  got = _of_fig(runs, settings, fig)
  ref = got[settings[0]]
  if not ref:
    return settings[0]
  ref_rate = statistics.median(x for x, _ in ref)
  best, best_rate = settings[0], ref_rate * (1 + margin)
  for s in settings[1:]:
    if not got[s] or not _agree(_loss_offs(got[s], ref[0][1])):
      continue
    rate = statistics.median(x for x, _ in got[s])
    if rate >= best_rate:
      best, best_rate = s, rate
  return best


def _named(parser, pairs: list[str], flag: str, what: str,
           empty: bool = True) -> dict[str, str]:
  """{NAME: VALUE} of `flag`'s NAME=VALUE arguments (VALUE may be empty
  only if `empty`); a parser error names the first that is not."""
  out = {}
  for extra in pairs:
    name, sep, value = extra.partition("=")
    if not (sep and name and (value or empty)):
      parser.error(f"{flag} takes NAME={what}, got {extra!r}")
    out[name] = value
  return out


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--settings", default="default,off,graphs,cublas",
                 help=f"of {', '.join(SETTINGS)}; the first is the reference")
  p.add_argument("--rounds", type=int, default=2)
  p.add_argument("--setting", action="append", default=[],
                 help="NAME=FLAGS: one more setting (repeatable)")
  p.add_argument("--winner_out", default="",
                 help="write the XLA_FLAGS of `winner` (the setting that "
                 "beats the first by >= 5%% on --winner_fig with its loss "
                 "agreeing, else the first) to this file, and its name to "
                 "stdout's last line")
  p.add_argument("--winner_fig", type=int, default=12)
  p.add_argument("--path_of", action="append", default=[],
                 help="NAME=PATH: setting NAME trains on gpu_paper.py's "
                 "path PATH (repeatable)")
  p.add_argument("--winner_path_out", default="",
                 help="with --winner_out: write the winner's --path_of "
                 "path to this file (empty: the shared --path)")
  p.add_argument("--setting_workdirs", default="",
                 help="each setting's gpu_paper.py in DIR/NAME (its rates "
                 "kept in its members_curves.json)")
  p.add_argument("--winner_curves_out", default="",
                 help="with --winner_out and --setting_workdirs: write the "
                 "path of the winner's members_curves.json to this file "
                 "(a section's --curves under the winner)")
  p.add_argument("rest", nargs="*", help="gpu_paper.py's arguments, after --")
  flags = p.parse_args()
  known = dict(SETTINGS)           # and those of --setting
  known.update(_named(p, flags.setting, "--setting", "FLAGS"))
  paths = _named(p, flags.path_of, "--path_of", "PATH", empty=False)
  settings = flags.settings.split(",")
  unknown = [s for s in settings if s not in known]
  if unknown:
    p.error(f"unknown setting(s) {', '.join(unknown)} (known: "
            f"{', '.join(known)}; --setting NAME=FLAGS adds one)")
  if flags.rounds < 1:
    p.error(f"--rounds must be >= 1, got {flags.rounds}")
  if flags.winner_curves_out and not (flags.winner_out
                                      and flags.setting_workdirs):
    p.error("--winner_curves_out needs --winner_out and --setting_workdirs")
  runs, t0 = [], time.time()
  for name in order(settings, flags.rounds):
    env = dict(os.environ)
    env["XLA_FLAGS"] = " ".join(
        x for x in (os.environ.get("XLA_FLAGS", ""), known[name]) if x)
    cmd = command(name, flags.rest, paths, flags.setting_workdirs)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True,
                         check=False)
    text = out.stdout + out.stderr
    found = parse(text)
    print(f"[{time.time() - t0:6.1f}s] {name}: rc {out.returncode}, "
          + (", ".join(f"fig{f} {r:.1f} steps/s (loss {l:.6g})"
                       for f, (r, l) in sorted(found.items()))
             or "no rate: " + text[-400:].replace("\n", " | ")), flush=True)
    runs.append((name, found))
  print("\n".join(summarize(runs, settings)), flush=True)
  if flags.winner_out:
    best = winner(runs, settings, flags.winner_fig)
    with open(flags.winner_out, "w") as f:
      f.write(known[best])
    if flags.winner_path_out:
      with open(flags.winner_path_out, "w") as f:
        f.write(paths.get(best, ""))
    if flags.winner_curves_out:
      with open(flags.winner_curves_out, "w") as f:
        f.write(os.path.join(setting_workdir(flags.setting_workdirs, best),
                             CURVES_FILE))
    print(f"winner on fig{flags.winner_fig}: {best} "
          f"(XLA_FLAGS {known[best] or '(none)'}"
          + (f", path {paths[best]}" if best in paths else "") + ")",
          flush=True)
  sys.exit(0 if any(r for _, r in runs) else 1)


if __name__ == "__main__":
  main()
