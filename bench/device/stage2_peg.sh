#!/usr/bin/env bash
# GPU job (H200): Stage 2 on RPent/PegInsertion-RLT-v0 with the h200 preset of
# examples/train_rlt_peg.py (16 workers, GPU rendering and features; stops itself after 8.5
# minutes with its final evaluation, checkpoint, results and plot written).
#   bash bench/device/stage2_peg.sh             # fresh run in /tmp/rlt_h200
#   bash bench/device/stage2_peg.sh --resume    # the next command on the still-warm machine
# Extra arguments go to the script (e.g. --expert-takeover, --max-minutes 9). Carry .carry
# (bench/device/pack_carry.sh). $OUT gets train.log, results.json, success_curve.png,
# weights.pt and the TensorBoard events (stage2.N.tfevents).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
run_dir=/tmp/rlt_h200
progress_free() { tr '\r' '\n' | grep -v "it/s\]$"; }
python3 examples/train_rlt_peg.py h200 --output-dir "$run_dir" "$@" 2>&1 \
  | progress_free >> "$out/train.log"
cp "$run_dir/results.json" "$run_dir/success_curve.png" "$run_dir/run/weights.pt" "$out/"
index=0
for events in "$run_dir"/tensorboard/events.*; do
  cp "$events" "$out/stage2.$index.tfevents"
  index=$((index + 1))
done
tail -n 6 "$out/train.log"
