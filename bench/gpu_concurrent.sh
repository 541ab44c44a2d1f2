#!/usr/bin/env bash
# Several bench/gpu_paper.py processes on one GPU at once: do the small
# models' launch-bound steps (~6 us a kernel, bench/gpu_results.md (12))
# fill the gaps of another run's? Each process is `bench/gpu_session.sh`
# with its own arguments, WORKDIR (WORKDIR_PREFIX, default runs/gpu_p, and
# I: runs/gpu_p1, ...), OUT (OUT/pI) and 0.9/N of
# the GPU's memory; the wheels are installed once, before.
#
#   bash bench/gpu_concurrent.sh "ARGS_1" "ARGS_2" [...]
#   e.g. bash bench/gpu_concurrent.sh \
#     "--stages train --figs 9 --both_readings --time_budget_s 400" \
#     "--stages train --figs 11 --both_readings --time_budget_s 400"
#
# Give each process runs no other one trains (`--stages train --figs`,
# not `todo`, which would pick the same first runs). Prints each process's
# exit status, wall time and its runs' timing lines, then the whole wall
# (and exits 1 if any process failed):
# against the runs' times alone (their projections, or the same runs one
# after another) that says what running them together gained.
#
# By default CUDA time-slices the GPU between processes: their kernels
# never run at once, so a process only fills the others' idle gaps (setup,
# compilation, evaluation, checkpoints, the host's turn between calls).
# MPS=1 (bench/gpu_section.sh sets it) starts a private daemon of CUDA's
# Multi-Process Service (pipes and logs under /tmp/qkspec-mps, quit at the
# end; no GPU setting changes), through which the processes' kernels share
# the SMs at once; where the machine lacks nvidia-cuda-mps-control, or no
# client reaches the daemon, it says so and goes on time-sliced.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_out}
source bench/gpu_wheels.sh || exit 1
mps=off
if [ "${MPS:-0}" = 1 ]; then
  if command -v nvidia-cuda-mps-control > /dev/null; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/qkspec-mps/pipe \
      CUDA_MPS_LOG_DIRECTORY=/tmp/qkspec-mps/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    # (-d fails where a call cut short left one running: that one serves)
    nvidia-cuda-mps-control -d 2> /dev/null
    # a client's first kernel starts the server; listed only if it did
    if timeout 120 python3 -c "import jax.numpy as j; j.ones(8).sum().block_until_ready()" \
        && [ -n "$(echo get_server_list | nvidia-cuda-mps-control)" ]; then
      mps=on
      trap 'echo quit | nvidia-cuda-mps-control' EXIT
    else
      echo quit | nvidia-cuda-mps-control > /dev/null 2>&1
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
      echo "MPS: no server came up (see /tmp/qkspec-mps/log): time-sliced"
    fi
  else
    echo "MPS: this machine has no nvidia-cuda-mps-control: time-sliced"
  fi
fi
fraction=$(python3 -c "print(f'{0.9 / $#:.2f}')")
t0=$(date +%s)
i=0
pids=()
for args in "$@"; do
  i=$((i + 1))
  mkdir -p "$OUT/p$i"
  (
    start=$(date +%s)
    # shellcheck disable=SC2086  # the arguments are meant to split
    NO_WHEELS=1 XLA_PYTHON_CLIENT_MEM_FRACTION=$fraction OUT="$OUT/p$i" \
      WORKDIR="${WORKDIR_PREFIX:-runs/gpu_p}$i" bash bench/gpu_session.sh $args \
      > "$OUT/p$i/session.txt" 2>&1
    rc=$?
    echo "process $i: rc $rc in $(( $(date +%s) - start )) s: $args"
    exit "$rc"
  ) &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done
for j in $(seq 1 "$i"); do
  grep -h "steps in\|stopped by" "$OUT/p$j/stdout.txt" 2>/dev/null \
    | sed "s/^/process $j: /"
done
echo "all $i processes in $(( $(date +%s) - t0 )) s, MPS $mps (results in $OUT/p*)"
[ "$failed" = 0 ] || { echo "$failed of $i processes failed"; exit 1; }
