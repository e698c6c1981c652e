#!/usr/bin/env bash
# GPU job (H200) of the learning issue, part 1: the embedded default feature model.
# Expert demonstrations with DART noise (16 workers, CPU physics, GPU rendering of every 3rd
# frame, 128 px) for COLLECT_MINUTES, Stage 1 (conv encoder, best validation checkpoint, cosine
# schedule over TRAIN_MINUTES), then the base policy's failure report on held-out seeds 0..99.
# The checkpoint stays in /tmp/ckpt for bench/device/stage2_peg.sh on the still-warm machine.
# Carry .carry (bench/device/pack_carry.sh). $OUT gets stage1.log, config.json,
# norm_stats.json, model.safetensors.xz.a? (split: join with cat), stage1.tfevents, eval_base/.
#   usage: bash bench/device/stage1_peg.sh [COLLECT_MINUTES] [TRAIN_MINUTES] [EVAL_SEEDS]
set -uo pipefail
cd "$(dirname "$0")/../.."
collect_minutes="${1:-2.5}"
train_minutes="${2:-3.5}"
eval_seeds="${3:-100}"
workers="${NUM_ENVS:-16}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
demos=/dev/shm/rpent_demos
rm -rf "$demos" /tmp/ckpt
python3 -m rpent_agents.stage1.collect --output-dir "$demos" --num-episodes 20000 --max-attempts 40000 \
  --seed 1000 --image-size 128 --npz-cache --num-workers "$workers" --render-backend "$RENDER" \
  --action-noise-std 0.2 --image-every 3 --max-minutes "$collect_minutes" \
  2>&1 | progress_free > "$out/stage1.log"
python3 -m rpent_agents.stage1.train train --data "$demos/frames.npz" --output-dir /tmp/ckpt \
  --steps 200000 --batch-size 256 --device "$DEVICE" --weights-dtype bfloat16 \
  --max-minutes "$train_minutes" --val-episodes "${VAL_EPISODES:-40}" --log-every 250 \
  --save-every 5000 2>&1 | progress_free >> "$out/stage1.log"
rm -rf "$demos"
python3 -m rpent_agents.stage2.eval_rlt --env.checkpoint /tmp/ckpt --env.render-backend "$RENDER" \
  --env.feature-device "$DEVICE" --num-envs "$workers" --num-episodes "$eval_seeds" \
  --output-dir "$out/eval_base" 2>&1 | progress_free >> "$out/stage1.log"
cp /tmp/ckpt/config.json /tmp/ckpt/norm_stats.json "$out/"
xz -T8 -c /tmp/ckpt/model.safetensors | split -b 15M - "$out/model.safetensors.xz."
cp /tmp/ckpt/tensorboard/events.* "$out/stage1.tfevents"
grep -e "wrote" -e "val/chunk_mse" -e "success" "$out/stage1.log" | tail -n 4
