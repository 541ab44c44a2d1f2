#!/usr/bin/env bash
# Peak resident memory of a short launch/train.py run of the paper's LM step
# (Fig. 6 model: d = 128, V = 33,278, T = 64, batch 64, one member, kappa1 =
# 100, kappa2 = 1), with the plain logits path (before) and the fused chunked
# loss (after), each measured by /usr/bin/time -v.
#
#   bash bench/train_memory.sh WIKITEXT_DIR [STEPS]      (default 20 steps)
#
# WIKITEXT_DIR holds the WikiText-2 token files (see qkspec/data/pipeline.py). The
# array_record files are built once first, outside the measured runs.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: bash bench/train_memory.sh WIKITEXT_DIR [STEPS]}
STEPS=${2:-20}
PY=${PYTHON:-python}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
$PY -c "import sys
from qkspec import data
c = data.default_config(); c.manual_dir, c.data_dir = sys.argv[1:]
data.load_splits(c)" "$DATA" "$TMP/tfds"

declare -A RSS SEC
for path in plain fused; do
  fused=$([ $path = fused ] && echo True || echo False)
  /usr/bin/time -v -o "$TMP/time_$path" $PY launch/train.py \
    --config configs/locater_wt2.py --config.sweep.kappa2="()" \
    --config.locater.kappa2=1.0 --config.model.fused_loss=$fused \
    --config.data.manual_dir="$DATA" --config.data.data_dir="$TMP/tfds" \
    --config.num_steps="$STEPS" --config.log_every=10 \
    --config.eval_every="$STEPS" --config.eval_max_batches=2 \
    --workdir "$TMP/run_$path" > "$TMP/log_$path" 2>&1 \
    || { tail -20 "$TMP/log_$path"; exit 1; }
  RSS[$path]=$(awk '/Maximum resident/ {print $NF}' "$TMP/time_$path")
  SEC[$path]=$(awk -F': ' '/Elapsed \(wall/ {print $2}' "$TMP/time_$path")
  echo "$path: peak RSS $(( RSS[$path] / 1024 )) MiB, wall ${SEC[$path]}" \
       "($STEPS steps, compilation and a 2-batch eval included)"
done
awk -v a="${RSS[plain]}" -v b="${RSS[fused]}" \
  'BEGIN{printf "fused / plain peak RSS = %.2f (%d MiB less)\n", b / a, (a - b) / 1024}'
