#!/usr/bin/env bash
# One GPU call, two steps: the XLA_FLAGS A/B on Figs. 12 and 10
# (bench/xla_flags_ab.py, its lines in OUT/ab.txt), then the section
# (bench/gpu_section.sh: its lanes, report and four files in OUT) under
# the A/B's winner (a setting that beats the first by >= 5% on Fig. 12 with
# its loss agreeing, else the first), with what is left of CALL_S seconds.
# Settings "norms" and "sublayer" are the XLA of default on other paths:
# each sublayer's last matmul in its norm's kernel (scan_bf16_pallas_
# fa3dw_norms: qkspec/training/ffn_kernel.py, proj_norm_kernel.py), and q,
# k, v in the attention's kernel too (_sublayer: qkv_attention_kernel.py);
# if one wins, the section trains on its path:
#   CALL_S=570 SETTINGS=default,norms,sublayer bash bench/gpu_ab_section.sh
# A lent GPU comes in short calls and goes back after ~30 s idle: one call
# spends no idle time choosing between them.
#
#   CALL_S=570 SETTINGS=default,graphs ROUNDS=1 bash bench/gpu_ab_section.sh
#   (a CPU rehearses it: ... bash bench/gpu_ab_section.sh --path
#   scan_f32_plain --rehearse; the arguments reach both steps' gpu_paper.py)
#
# AB_ONLY=1 stops after the A/B: the section then takes a call of its own
# (its ten minutes measured whole, issue 10's goal 2), as the next lines
# say. The winner's rates (Figs. 12 and 10, five members) are kept in the
# file that WINNER.curves names, the section's --curves.
#
# The winner's flags are left in WINNER (default /tmp/qkspec_ab_winner)
# and its path, if it has its own, in WINNER.path, for a next call that
# runs the section under them (or resumes it: its runs were started on
# them):
#   XLA_FLAGS="$(cat /tmp/qkspec_ab_winner)" bash bench/gpu_section.sh \
#     --time_budget_s S $(p=$(cat /tmp/qkspec_ab_winner.path); \
#     [ -n "$p" ] && echo --path "$p") \
#     $(c=$(cat /tmp/qkspec_ab_winner.curves); [ -f "$c" ] && echo --curves "$c")
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
CALL_S=${CALL_S:-570}
OUT=${OUT:-runs/gpu_section_out}
WINNER=${WINNER:-/tmp/qkspec_ab_winner}
mkdir -p "$OUT"
source bench/gpu_wheels.sh || exit 1
path=$(python3 -c "from qkspec.experiments import report_plan
print(report_plan.GPU_PATH)") || exit 1
rm -f "$WINNER" "$WINNER.path" "$WINNER.curves"
python3 bench/xla_flags_ab.py --settings "${SETTINGS:-default,graphs}" \
  --rounds "${ROUNDS:-1}" --winner_out "$WINNER" \
  --setting norms= --path_of norms=scan_bf16_pallas_fa3dw_norms \
  --setting sublayer= \
  --path_of sublayer=scan_bf16_pallas_fa3dw_sublayer \
  --winner_path_out "$WINNER.path" --setting_workdirs /tmp/qkspec_ab \
  --winner_curves_out "$WINNER.curves" -- \
  --tfds_dir "${TFDS_DIR:-.gpudata/tfds}" \
  --path "$path" --figs 12,10 --probe_steps "${PROBE_STEPS:-1500}" "$@" \
  2>&1 | tee "$OUT/ab.txt"
[ -f "$WINNER" ] || { echo "the A/B chose no setting"; exit 1; }
# the winner's rates just measured, each its model's point at five
# members: the section's projections read them (gpu_paper.py rates)
curves=$(cat "$WINNER.curves" 2>/dev/null)
[ -f "$curves" ] || curves=
if [ -n "${AB_ONLY:-}" ]; then
  echo "AB_ONLY: the section is left to the next call (--curves $curves)"
  exit 0
fi
left=$(( CALL_S - ($(date +%s) - t0) - 25 ))   # the report and packing
won_path=$(cat "$WINNER.path" 2>/dev/null)
echo "section under XLA_FLAGS '$(cat "$WINNER")'" \
  "${won_path:+on path $won_path }with --time_budget_s $left"
XLA_FLAGS="$(cat "$WINNER")" NO_WHEELS=1 OUT="$OUT" \
  bash bench/gpu_section.sh --time_budget_s "$left" "$@" \
  ${won_path:+--path "$won_path"} ${curves:+--curves "$curves"}
