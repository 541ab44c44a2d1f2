#!/usr/bin/env bash
# The paper's whole experimental section on one GPU (issue 10, goal 2):
# the kappa2 sweeps of Figs. 6, 8, 9, 10, 11 and 12 (d in {32, 128} x
# L in {1, 3, 6}, five kappa2 members each, one reading of kappa, 50,000
# steps, periodic evaluation), each run's figures, and one report of the
# six (tables, verdicts, curves) in WORK/REPRODUCTION.md (OUT/work.tgz).
#
#   bash bench/gpu_section.sh [gpu_paper.py arguments ...]
#   e.g. bash bench/gpu_section.sh --time_budget_s 540
#
# 1. plan, beside the lanes' start: the projected wall time at the
#    members curves measured on this device kind
#    (bench/members_curves.json, `gpu_paper.py --stages plan`), one
#    figure after another and in the lanes below.
# 2. the lanes at once (bench/gpu_concurrent.sh, with CUDA's Multi-Process
#    Service where the machine has it; MPS=0: time-sliced). A step has a
#    part that fills the GPU (the output projection's loss, its largest
#    at d = 128) and one of many small kernels (its layers, most at L = 6).
#    By default the lanes are Figs. 8, 12, 9 and Figs. 6, 11, 10: each
#    mixes both parts, and they project evenly (7.6 | 7.8 min on the
#    H200), where the d = 128 figures beside the d = 32 ones
#    (LANES="6,11,12 8,9,10") leave a 9.3 min lane. Each lane begins
#    with its one-layer figure: the first run's compilation is the only
#    one the GPU waits for (the later ones compile while a run trains,
#    below), and a one-layer model's is about half of a six-layer one's
#    (each step compiled for an H100 on a 2-core CPU, no autotuning, jax
#    and XLA: Figs. 8 and 6 10 and 11 s, Figs. 12 and 11 20 and 16 s,
#    bench/gpu_results.md (22)). Measured on the H200:
#    two lanes did 1.24 times one GPU's work in (16), 1.04-1.16 at (19)'s
#    fewer kernels a step, and the section took ~11 min ((19), from two
#    calls' pieces). Each lane trains its runs one after another, building
#    and compiling the next on a thread while one trains and drawing a
#    finished run's figures there (gpu_paper.py --prepare_next; until
#    (19) each lane first compiled its runs side by side, the warm stage,
#    36-38 s before its first step, and each run still spent 5-15 s in
#    setup and compilation).
# 3. the report of the section's runs alone (launch/report.py --norecords,
#    on the CPU, its figures drawn side by side) and the section's wall
#    time (the report's part said).
#
# Trains on the runs' path (qkspec.experiments.report_plan.GPU_PATH: a
# Hopper GPU's) unless --path names another (elsewhere: --path
# scan_bf16_pallas); --fairseq: fairseq's reading of kappa; --time_budget_s
# stops each lane at a call boundary with its checkpoint saved; a rerun on
# the same machine resumes each run (WORKDIRs runs/gpu_section_lane1, 2).
# The arguments reach each lane's gpu_paper.py as words split at spaces
# (none may hold one). LANES="8,12,9 6,11,10" (the default) regroups the
# figures; exits 1 if a lane failed.
#
# What comes back from a lent GPU is at most 8 files (OUT), so the section
# works in WORK (default runs/gpu_section_work: the plan, the lanes' logs
# and runs.tgz, the report) and leaves in OUT four: section.txt (the plan,
# the lanes' lines and the section's wall time), lane1.tgz and lane2.tgz
# (each lane's runs, to unpack in runs/) and work.tgz (WORK's logs and the
# section's report, runs.tgz left out). Needs what
# bench/gpu_session.sh needs (BUILD.md, "A GPU machine without network
# access"); a CPU rehearses it with --path scan_f32_plain --rehearse.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_section_out}
WORK=${WORK:-runs/gpu_section_work}
LANES=${LANES:-8,12,9 6,11,10}
mkdir -p "$OUT" "$WORK"
source bench/gpu_wheels.sh || exit 1
read -r -a lanes <<< "$LANES"
path=$(python3 -c "from qkspec.experiments import report_plan
print(report_plan.GPU_PATH)") || exit 1
t0=$(date +%s)
rm -f "$WORK/plan.txt"
# the projection (it reads the members curves: ~3 s) while the lanes start
python3 bench/gpu_paper.py --tfds_dir "${TFDS_DIR:-.gpudata/tfds}" \
  --workdir "$WORK/plan" --stages plan --path "$path" \
  --figs "$(IFS=,; echo "${lanes[*]}")" \
  --lanes "$(IFS=/; echo "${lanes[*]}")" "$@" > "$WORK/plan_log.txt" 2>&1 \
  && grep "projected" "$WORK/plan_log.txt" | tee "$WORK/plan.txt" &
plan_pid=$!
args=()
for lane in "${lanes[@]}"; do
  args+=("--stages train --figs $lane --path $path $*")
done
prefix=runs/gpu_section_lane          # the lanes' WORKDIRs: prefix1, prefix2
MPS=${MPS:-1} NO_WHEELS=1 WORKDIR_PREFIX=$prefix \
  OUT="$WORK/lanes" bash bench/gpu_concurrent.sh "${args[@]}" \
  | tee "$WORK/lanes.txt"
rc=${PIPESTATUS[0]}
wait "$plan_pid" || { cat "$WORK/plan_log.txt"; rc=1; }
runs=$(find "$prefix"* -mindepth 2 -maxdepth 2 \
  -name members.json -printf '%h\n' 2>/dev/null | sort | paste -sd,)
t_report=$(date +%s)
if [ -n "$runs" ]; then
  # on the CPU: it computes nothing a GPU would speed up, and starting one
  # costs seconds; its figures are drawn side by side (figure_writer)
  JAX_PLATFORMS=cpu python3 launch/report.py --norecords --runs "$runs" \
    --out "$WORK/REPRODUCTION.md" > "$WORK/report.txt" 2>&1 \
    || echo "report failed: see $WORK/report.txt"
fi
echo "section: Figs. $(IFS=,; echo "${lanes[*]}") in" \
  "$(( $(date +%s) - t0 )) s (the report $(( $(date +%s) - t_report )) s)," \
  "lanes ${lanes[*]} (the runs: $WORK/lanes.txt;" \
  "the report: $WORK/REPRODUCTION.md)" | tee "$WORK/section.txt"
cat "$WORK/plan.txt" "$WORK/lanes.txt" "$WORK/section.txt" \
  > "$OUT/section.txt" 2> /dev/null
for i in $(seq "${#lanes[@]}"); do
  if [ -f "$WORK/lanes/p$i/runs.tgz" ]; then
    cp "$WORK/lanes/p$i/runs.tgz" "$OUT/lane$i.tgz"
  fi
done
tar czf "$OUT/work.tgz" --exclude=runs.tgz --exclude=plan -C "$WORK" .
echo "brought back: $(cd "$OUT" && ls | paste -sd' ')"
exit "$rc"
