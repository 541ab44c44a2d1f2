#!/usr/bin/env bash
# One GPU slice of the paper's Sec. 7: install the carried wheels, run
# bench/gpu_paper.py with the given arguments, summarise any traces, and
# leave the small results in OUT (default runs/gpu_out) as a tarball.
#
#   bash bench/gpu_session.sh [gpu_paper.py arguments ...]
#   e.g. bash bench/gpu_session.sh --stages probe,train --figs 6 \
#          --time_budget_s 500
#
# Expects (BUILD.md, "A GPU machine without network access"): python3 with
# CUDA jax, flax, optax, orbax and chex; `.whl/` with the wheels of
# tensorflow-datasets, grain, array_record, ml_collections and their small
# dependencies (bench/gpu_wheels.sh installs them; skipped when absent or
# NO_WHEELS=1: a full install needs none); WikiText-2
# built into `.gpudata/tfds` (override with TFDS_DIR). Runs go to
# WORKDIR (default runs/gpu_paper) and resume from it when rerun.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_out}
WORKDIR=${WORKDIR:-runs/gpu_paper}
mkdir -p "$OUT"
source bench/gpu_wheels.sh || exit 1
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-.92}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null
python3 bench/gpu_paper.py --tfds_dir "${TFDS_DIR:-.gpudata/tfds}" \
  --workdir "$WORKDIR" "$@" 2> "$OUT/stderr.txt" | tee "$OUT/stdout.txt"
rc=${PIPESTATUS[0]}
if compgen -G "$WORKDIR/traces/*.json.gz" > /dev/null; then
  python3 bench/trace_summary.py "$WORKDIR"/traces/*.json.gz \
    | tee "$OUT/trace.txt"
fi
tar czf "$OUT/runs.tgz" --exclude=ckpt --exclude=traces --exclude=jax_cache \
  -C "$(dirname "$WORKDIR")" "$(basename "$WORKDIR")"
echo "results in $OUT (stdout.txt, stderr.txt, runs.tgz); gpu_paper.py rc=$rc"
exit "$rc"
