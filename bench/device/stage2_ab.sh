#!/usr/bin/env bash
# GPU job (H200) of the learning and throughput issues: the training loop's env steps/s with 16
# workers (bench/stage2_throughput.py --no-raw), then two Stage 2 runs side by side on the same
# held-out seeds, 8 workers each, for MAX_MINUTES: A = the shipped `sample-efficient` preset,
# B = the same schedule with the reference's actor (no Q normalization, noise 0.002, the expert's
# chunk as the stored reference on expert steps). Expert takeover on in training for both.
# Uses /tmp/ckpt when the machine holds bench/device/stage1_peg.sh's checkpoint, else the
# embedded default. Carry .carry. $OUT gets throughput.json, {a,b}_results.json,
# {a,b}_curve.png, a_weights.pt and logs.tar.gz (both train logs, TensorBoard events, b_weights.pt).
#   bash bench/device/stage2_ab.sh [MAX_MINUTES]
set -uo pipefail
cd "$(dirname "$0")/../.."
max_minutes="${1:-8}"
workers="${NUM_ENVS:-8}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
checkpoint=$(stage1_checkpoint)
if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
  python3 bench/stage2_throughput.py --no-raw --num-envs "${THROUGHPUT_ENVS:-16}" \
    --render-backend "$RENDER" --feature-device "$DEVICE" --checkpoint "$checkpoint" \
    --loop-iterations "${LOOP_ITERATIONS:-40}" 2> "$out/throughput.err" > "$out/throughput.json"
  cat "$out/throughput.json"
fi
common=(--env.checkpoint "$checkpoint" --env.render-backend "$RENDER" --env.feature-device "$DEVICE"
  --env.expert-takeover --num-envs "$workers" --total-env-steps "${TOTAL_ENV_STEPS:-300000}"
  --eval-every-env-steps "${EVAL_EVERY:-1000000}" --num-eval-episodes "${EVAL_SEEDS:-100}"
  --max-minutes "$max_minutes")
reference_actor=(--stage2.no-normalize-q --stage2.actor-noise-std 0.002
  --stage2.reference-on-interventions executed)
mkdir -p /tmp/ab
python3 -m rpent_agents.stage2.train sample-efficient --output-dir /tmp/ab/a "${common[@]}" \
  2>&1 | progress_free > /tmp/ab/a.log &
python3 -m rpent_agents.stage2.train sample-efficient --output-dir /tmp/ab/b "${common[@]}" \
  "${reference_actor[@]}" 2>&1 | progress_free > /tmp/ab/b.log &
wait
for run in a b; do
  cp "/tmp/ab/$run/results.json" "$out/${run}_results.json"
  cp "/tmp/ab/$run/success_curve.png" "$out/${run}_curve.png"
  mkdir -p "/tmp/ab/logs/$run"
  cp /tmp/ab/$run/tensorboard/events.* "/tmp/ab/logs/$run/"
  cp "/tmp/ab/$run.log" "/tmp/ab/logs/"
done
cp /tmp/ab/a/run/weights.pt "$out/a_weights.pt"
cp /tmp/ab/b/run/weights.pt /tmp/ab/logs/b_weights.pt
tar -czf "$out/logs.tar.gz" -C /tmp/ab logs
tail -n 2 /tmp/ab/a.log /tmp/ab/b.log
