#!/usr/bin/env bash
# The full Fig. 6 sweep on one NVIDIA GPU, as one vmapped program:
# 5 kappa2 members, d = 128, L = 1, T = 64, batch 64, 50,000 steps.
#
#   bash bench/gpu_fig6.sh WIKITEXT_DIR [WORKDIR] [NUM_STEPS]
#
# WIKITEXT_DIR holds wiki.{train,valid,test}.tokens (or train/valid/test.txt).
# Installs the CUDA build of jax into .venv-gpu, probes the speed on 200
# steps, prints steps/s and the projected wall time, then runs NUM_STEPS
# (default 50,000; rerunning resumes from the last checkpoint) and prints
# the final valid/test perplexities of each member. Target: the whole sweep
# in under 10 minutes on one H100.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: bash bench/gpu_fig6.sh WIKITEXT_DIR [WORKDIR] [NUM_STEPS]}
WORKDIR=${2:-runs/gpu_fig6}
STEPS=${3:-50000}
PY=.venv-gpu/bin/python
[ -x "$PY" ] || python3 -m venv .venv-gpu
$PY -m pip install -q -e . "jax[cuda12]"
$PY -c "import jax; print('devices:', jax.devices())"

run() {  # run NUM_STEPS WORKDIR [extra flags]
  local n=$1 dir=$2; shift 2
  $PY launch/train.py --config configs/locater_wt2.py \
    --config.data.manual_dir="$DATA" --config.data.data_dir="$WORKDIR/tfds" \
    --config.num_steps="$n" --config.log_every=250 --config.eval_every="$n" \
    --config.checkpoint_every=5000 --workdir "$dir" "$@"
}

start=$(date +%s)
run 200 "$WORKDIR/probe" --config.eval_max_batches=1 2>&1 | grep -E "steps/s" | tail -1
probe=$(( $(date +%s) - start ))
echo "probe: 200 steps (compile included) in ${probe} s;" \
     "projected for $STEPS steps: about $(( probe * STEPS / 200 / 60 )) min (an upper bound)"

start=$(date +%s)
run "$STEPS" "$WORKDIR/sweep" 2>&1 | grep -E "steps/s|eval" | tail -4
echo "actual wall time: $(( $(date +%s) - start )) s for $STEPS steps"
for m in "$WORKDIR"/sweep/kappa2=*; do
  echo "$(basename "$m"): $(grep '"valid/ppl"' "$m/metrics.jsonl" | tail -1)"
done
$PY launch/plot_training.py --workdir "$WORKDIR/sweep"
