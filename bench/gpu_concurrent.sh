#!/usr/bin/env bash
# Several bench/gpu_paper.py processes on one GPU at once: do the small
# models' launch-bound steps (~6 us a kernel, bench/gpu_results.md (12))
# fill the gaps of another run's? Each process is `bench/gpu_session.sh`
# with its own arguments, WORKDIR (runs/gpu_pI), OUT (OUT/pI) and 0.9/N of
# the GPU's memory; the wheels are installed once, before.
#
#   bash bench/gpu_concurrent.sh "ARGS_1" "ARGS_2" [...]
#   e.g. bash bench/gpu_concurrent.sh \
#     "--stages train --figs 9 --both_readings --time_budget_s 400" \
#     "--stages train --figs 11 --both_readings --time_budget_s 400"
#
# Give each process runs no other one trains (`--stages train --figs`,
# not `todo`, which would pick the same first runs). Prints each process's
# exit status, wall time and its runs' timing lines, then the whole wall:
# against the runs' times alone (their projections, or the same runs one
# after another) that says what running them together gained.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_out}
source bench/gpu_wheels.sh || exit 1
fraction=$(python3 -c "print(f'{0.9 / $#:.2f}')")
t0=$(date +%s)
i=0
for args in "$@"; do
  i=$((i + 1))
  mkdir -p "$OUT/p$i"
  (
    start=$(date +%s)
    # shellcheck disable=SC2086  # the arguments are meant to split
    NO_WHEELS=1 XLA_PYTHON_CLIENT_MEM_FRACTION=$fraction OUT="$OUT/p$i" \
      WORKDIR="runs/gpu_p$i" bash bench/gpu_session.sh $args \
      > "$OUT/p$i/session.txt" 2>&1
    echo "process $i: rc $? in $(( $(date +%s) - start )) s: $args"
  ) &
done
wait
for j in $(seq 1 "$i"); do
  grep -h "steps in\|stopped by" "$OUT/p$j/stdout.txt" 2>/dev/null \
    | sed "s/^/process $j: /"
done
echo "all $i processes in $(( $(date +%s) - t0 )) s (results in $OUT/p*)"
