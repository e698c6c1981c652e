#!/usr/bin/env bash
# GPU machine: collect expert demos (CPU physics, GPU rendering, 16 workers) straight into a
# frame cache, train the embedded default feature model (Stage 1, bf16 autocast), and benchmark
# featurization and the Stage 2 learner. The checkpoint stays in /tmp/ckpt for a following
# Stage 2 call on the same (warm) machine; its files and the logs land in $OUT.
#   usage: bash bench/device/stage1_default.sh [NUM_DEMOS] [TRAIN_MINUTES]
set -uo pipefail
cd "$(dirname "$0")/../.."
num_demos="${1:-300}"
train_minutes="${2:-5}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
progress_free() { tr '\r' '\n' | grep -v "it/s\]$"; }
python3 -m rpent_agents.demos --output-dir /tmp/demos/peg64 --num-episodes "$num_demos" \
  --seed 1000 --image-size 64 --npz-cache --num-workers 16 --render-backend gpu \
  2>&1 | progress_free > "$out/run.log"
python3 -m rpent_agents.stage1 train --data /tmp/demos/peg64/frames.npz \
  --output-dir /tmp/ckpt --steps 200000 --batch-size 256 --device cuda \
  --weights-dtype bfloat16 --max-minutes "$train_minutes" --log-every 500 --save-every 5000 \
  2>&1 | progress_free >> "$out/run.log"
tail -n 4 "$out/run.log"
cp /tmp/ckpt/config.json /tmp/ckpt/norm_stats.json "$out/"
xz -T4 -c /tmp/ckpt/model.safetensors > "$out/model.safetensors.xz"
cp /tmp/ckpt/tensorboard/events.* "$out/stage1.tfevents"
python3 bench/featurize.py --device cuda --dtype bfloat16 --size full --batch-sizes 1 64 \
  > "$out/featurize.txt" 2>&1
tail -n 4 "$out/featurize.txt"
python3 bench/learner_speed.py --device cuda --updates 3000 > "$out/learner_speed.txt" 2>&1
tail -n 6 "$out/learner_speed.txt"
