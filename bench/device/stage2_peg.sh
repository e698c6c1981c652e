#!/usr/bin/env bash
# GPU job (H200) of the learning and throughput issues, part 2: the training loop's env steps/s
# against the raw env (bench/stage2_throughput.py, 16 workers), then Stage 2 on the peg RLT stack
# (`rpent-stage2 sample-efficient`, 16 workers, GPU rendering and features, expert takeover in
# training, evaluation on held-out seeds 0..99 without it). Uses /tmp/ckpt when the machine
# still holds bench/device/stage1_peg.sh's checkpoint, else the embedded default.
# Carry .carry. $OUT gets throughput.json, train.log, results.json, success_curve.png,
# weights.pt and the TensorBoard events.
#   bash bench/device/stage2_peg.sh [MAX_MINUTES] [extra rpent-stage2 flags]
#   bash bench/device/stage2_peg.sh 8 --resume   # the next command on the still-warm machine
set -uo pipefail
cd "$(dirname "$0")/../.."
max_minutes="${1:-7}"
shift || true
workers="${NUM_ENVS:-16}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
checkpoint=$(stage1_checkpoint)
echo "checkpoint: $checkpoint" > "$out/train.log"
if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
  python3 bench/stage2_throughput.py --num-envs "$workers" --render-backend "$RENDER" \
    --feature-device "$DEVICE" --checkpoint "$checkpoint" --raw-steps "${RAW_STEPS:-200}" \
    --loop-iterations "${LOOP_ITERATIONS:-40}" 2> "$out/throughput.err" > "$out/throughput.json"
  cat "$out/throughput.json"
fi
run_dir=/tmp/rlt_peg
python3 -m rpent_agents.stage2.train sample-efficient --output-dir "$run_dir" \
  --env.checkpoint "$checkpoint" --env.render-backend "$RENDER" --env.feature-device "$DEVICE" \
  --env.expert-takeover --num-envs "$workers" --total-env-steps "${TOTAL_ENV_STEPS:-300000}" \
  --eval-every-env-steps "${EVAL_EVERY:-100000}" --num-eval-episodes "${EVAL_SEEDS:-100}" \
  --max-minutes "$max_minutes" "$@" 2>&1 | progress_free >> "$out/train.log"
cp "$run_dir/results.json" "$run_dir/success_curve.png" "$run_dir/run/weights.pt" "$out/"
cat "$run_dir"/tensorboard/events.* > "$out/stage2.tfevents"
tail -n 3 "$out/train.log"
