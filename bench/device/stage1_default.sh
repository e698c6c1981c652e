#!/usr/bin/env bash
# GPU machine: collect expert demos (CPU physics, GPU rendering, 16 workers) straight into a
# frame cache, train the embedded default feature model (Stage 1), evaluate it as a base policy
# on 50 held-out seeds, and benchmark featurization. Results land in $OUT.
#   usage: bash bench/device/stage1_default.sh [NUM_DEMOS] [TRAIN_MINUTES]
set -uo pipefail
cd "$(dirname "$0")/../.."
num_demos="${1:-300}"
train_minutes="${2:-5}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
python3 -m rpent_agents.demos --output-dir /tmp/demos/peg64 --num-episodes "$num_demos" \
  --seed 1000 --image-size 64 --npz-cache --num-workers 16 --render-backend gpu \
  2>&1 | tr '\r' '\n' | grep -v "it/s\]$" > "$out/collect.log"
tail -n 3 "$out/collect.log"
python3 -m rpent_agents.stage1 train --data /tmp/demos/peg64/frames.npz \
  --output-dir /tmp/ckpt --steps 100000 --batch-size 128 --device cuda \
  --weights-dtype bfloat16 --max-minutes "$train_minutes" --log-every 250 --save-every 2000 \
  2>&1 | tr '\r' '\n' | grep -v "it/s\]$" > "$out/stage1.log"
tail -n 3 "$out/stage1.log"
cp /tmp/ckpt/config.json /tmp/ckpt/norm_stats.json "$out/"
xz -T4 -c /tmp/ckpt/model.safetensors > "$out/model.safetensors.xz"
cp /tmp/ckpt/tensorboard/events.* "$out/stage1.tfevents"
python3 bench/featurize.py --device cuda --dtype bfloat16 --size full --batch-sizes 1 64 \
  > "$out/featurize.txt" 2>&1
cat "$out/featurize.txt" | tail -n 5
python3 -m rpent_agents.rlt_envs --checkpoint /tmp/ckpt --num-episodes 50 --seed 0 \
  --device cuda --render-backend gpu --report-json "$out/base_policy.json" 2>&1 | tail -n 2
