#!/usr/bin/env bash
# The full Fig. 6 sweep on one NVIDIA GPU, as one vmapped program:
# 5 kappa2 members, d = 128, L = 1, T = 64, batch 64, 50,000 steps.
#
#   bash bench/gpu_fig6.sh WIKITEXT_DIR [WORKDIR] [NUM_STEPS]
#
# WIKITEXT_DIR holds wiki.{train,valid,test}.tokens (or train/valid/test.txt).
#
# 1. Python: by default a fresh .venv-gpu with this package and the CUDA
#    build of jax (`jax[cuda13]`; needs the package index). On an offline
#    machine whose python already has CUDA jax, set PYTHON=python3: nothing
#    is installed and this checkout is put on PYTHONPATH.
# 2. Probe: each loss variant (fused chunked loss with 512 and 4096 rows per
#    chunk, plain logits) trains the sweep for PROBE_STEPS steps (default
#    300); the rate after the first third (compilation excluded) is
#    printed with the projected wall time for NUM_STEPS, and the fastest
#    variant is kept. (REQUIRE_GPU=0 lets a CPU rehearse the script.)
# 3. The sweep: NUM_STEPS steps (default 50,000; rerunning with the same
#    WORKDIR resumes from the last checkpoint) with the fastest variant;
#    prints steps/s, the actual wall time, each member's final valid/test
#    perplexity, and writes the Fig. 6 plots into WORKDIR/sweep. With
#    TIME_BUDGET_S set, the sweep is shortened (to whole thousands of steps)
#    to what the probed rate fits into that many seconds, and says so.
# Target: the whole 50,000-step sweep in under 10 minutes on one H100.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: bash bench/gpu_fig6.sh WIKITEXT_DIR [WORKDIR] [NUM_STEPS]}
WORKDIR=${2:-runs/gpu_fig6}
STEPS=${3:-50000}
PROBE_STEPS=${PROBE_STEPS:-300}

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  PY=.venv-gpu/bin/python
  [ -x "$PY" ] || python3 -m venv .venv-gpu
  $PY -m pip install -q -e . "jax[cuda13]"
fi
$PY -c "import jax; print('jax', jax.__version__, jax.devices())
assert jax.default_backend() == 'gpu' or '${REQUIRE_GPU:-1}' == '0', 'no GPU'"

run() {  # run NUM_STEPS WORKDIR [extra flags]: prints the training log
  local n=$1 dir=$2; shift 2
  $PY launch/train.py --config configs/locater_wt2.py \
    --config.data.manual_dir="$DATA" --config.data.data_dir="$WORKDIR/tfds" \
    --config.num_steps="$n" --config.checkpoint_every=5000 \
    --workdir "$dir" "$@" 2>&1
}

rate() {  # the steps/s of the last progress line on stdin
  grep -oE "[0-9.]+ steps/s" | tail -1 | cut -d' ' -f1
}

declare -A VARIANTS=(
  [fused512]="--config.model.fused_loss=True --config.model.loss_chunk=512"
  [fused4096]="--config.model.fused_loss=True --config.model.loss_chunk=4096"
  [plain]="--config.model.fused_loss=False"
)
best="" best_rate=0
for v in fused512 fused4096 plain; do
  # shellcheck disable=SC2086
  r=$(run "$PROBE_STEPS" "$WORKDIR/probe_$v" \
        --config.log_every=$(( (PROBE_STEPS + 2) / 3 )) \
        --config.eval_every="$PROBE_STEPS" --config.eval_max_batches=1 \
        ${VARIANTS[$v]} | rate)
  echo "probe $v: ${r:-?} steps/s (5 members per step) -> projected" \
       "$(awk -v r="${r:-0}" -v n="$STEPS" \
          'BEGIN{if (r > 0) printf "%.1f min", n / r / 60; else print "?"}')" \
       "for $STEPS steps"
  if awk -v a="${r:-0}" -v b="$best_rate" 'BEGIN{exit !(a > b)}'; then
    best=$v best_rate=$r
  fi
done
[ -n "$best" ] || { echo "every probe failed; see $WORKDIR/probe_*"; exit 1; }
echo "fastest: $best"
if [ -n "${TIME_BUDGET_S:-}" ]; then  # shorten the sweep to fit a time limit
  fit=$(awk -v r="$best_rate" -v t="$TIME_BUDGET_S" \
        'BEGIN{n = int(r * t / 1000) * 1000; print (n > 1000 ? n : 1000)}')
  if [ "$fit" -lt "$STEPS" ]; then
    echo "shortened: $fit of $STEPS steps fit TIME_BUDGET_S=$TIME_BUDGET_S s"
    STEPS=$fit
  fi
fi

start=$(date +%s)
# shellcheck disable=SC2086
run "$STEPS" "$WORKDIR/sweep" --config.log_every=1000 \
  --config.eval_every="$(( STEPS < 5000 ? STEPS : 5000 ))" ${VARIANTS[$best]} \
  | tee "$WORKDIR/sweep.log" | grep -E "steps/s|eval:|Error|error" | tail -4
echo "actual wall time: $(( $(date +%s) - start )) s for $STEPS steps" \
     "(compilation and evaluation included)"
$PY - "$WORKDIR/sweep" <<'EOF'
import sys
from qkspec import plot_training
for m in plot_training.load_members(sys.argv[1]):
  last = {k: v[-1][-1] for k, v in m["metrics"].items() if len(v[0])}
  get = lambda k: last.get(k, float("nan"))
  print(f"kappa2={m['kappa2']:<6g} valid ppl {get('valid/ppl'):9.2f}  test ppl "
        f"{get('test/ppl'):9.2f}  tr(W^T W) {get('mean/qk_scale'):.4g}  "
        f"entropy {get('mean/entropy'):.4f}")
EOF
$PY launch/plot_training.py --workdir "$WORKDIR/sweep" 2>&1 | tail -1
