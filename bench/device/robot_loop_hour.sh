#!/usr/bin/env bash
# GPU job of issue 52 in a robot owner's setting: bench/robot_loop_hour.py (the one-env loop of
# `rpent-stage2-robot sim-stand-in`, the robot-hour learner on the GPU), the runs of RUNS side by
# side while the base is evaluated once into base.json; then each run's evaluations, reading
# that base: its last actor on the validation seeds 0..99 and the test seeds 50000..50255, then
# its earlier segments on the validation seeds (latest first; results.json is written after each).
# The runs share the machine: their wall times are not a run's own. Carry .carry.
# $OUT (default /tmp/out) gets base.json, <name>/ per run (results.json, success_curve.png,
# segments.json, segments/*.pt, loop/) with <name>.log, and done.
#   (OUT=/tmp/job setsid nohup bash bench/device/robot_loop_hour.sh > /tmp/job.log 2>&1 < /dev/null &)
#   tail -n 3 /tmp/job/*.log; tar -czf $OUT/job.tgz -C /tmp/job --exclude=loop --exclude=segments .
# RUNS: runs separated by ';', each "name flags..." (default: three training seeds, and one
# without the expert); TOTAL_ENV_STEPS, SEGMENT_ENV_STEPS, VAL_SEEDS ("0 100"),
# TEST_SEEDS ("50000 256"), NUM_ENVS (evaluation workers per run, 4) make it smaller;
# EVALUATE=0 trains only (evaluate elsewhere: bench/robot_loop_hour.py --phase evaluate).
# DEMOS=N first collects N expert demonstrations (seeds from 1000) and converts their last
# DEMO_FINAL_CHUNKS (3) chunks into $OUT/demos.npz, for runs that name it, e.g.
#   "ademo --train-seed 100000 --demo-transitions /tmp/job/demos.npz --demo-pretrain-updates 3000"
# RPENT_DRY_RUN=1 runs it on this CPU machine (see gpu_env.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
source bench/device/gpu_env.sh
out="${OUT:-/tmp/out}"
mkdir -p "$out"
runs="${RUNS:-a --train-seed 100000;b --train-seed 300000 --stage2-seed 11;c --train-seed 600000 --stage2-seed 23;noexpert --train-seed 100000 --no-expert}"
common=(
  --total-env-steps "${TOTAL_ENV_STEPS:-30000}" --segment-env-steps "${SEGMENT_ENV_STEPS:-5000}"
  --val-seeds ${VAL_SEEDS:-0 100} --test-seeds ${TEST_SEEDS:-50000 256}
  --num-envs "${NUM_ENVS:-4}" --base-file "$out/base.json"
  --env-kwargs "{\"render_backend\": \"$RENDER\", \"feature_device\": \"$DEVICE\"}"
)
if [ "${DEMOS:-0}" -gt 0 ]; then
  python3 -m rpent_agents.stage1.collect --output-dir "$out/demos" --num-episodes "$DEMOS" \
    --seed 1000 --npz-cache --num-workers 8 --render-backend "$RENDER" 2>&1 | progress_free \
    > "$out/demos.log" || exit 1
  python3 -m rpent_agents.stage2.demo_transitions --cache "$out/demos/frames.npz" \
    --output "$out/demos.npz" --reference-on-interventions observed \
    --final-chunks "${DEMO_FINAL_CHUNKS:-3}" --device "$DEVICE" 2>&1 | progress_free \
    >> "$out/demos.log" || exit 1
fi
evaluate="${EVALUATE:-1}"
base_pid=""
if [ "$evaluate" = 1 ]; then
  python3 bench/robot_loop_hour.py --phase base "${common[@]}" 2>&1 | progress_free > "$out/base.log" &
  base_pid=$!
fi
IFS=';' read -r -a specs <<< "$runs"
for spec in "${specs[@]}"; do
  read -r name flags <<< "$spec"
  (
    # shellcheck disable=SC2086  # flags is a list of words
    python3 bench/robot_loop_hour.py --phase train --output-dir "$out/$name" "${common[@]}" \
      --learner-device "$DEVICE" --command-args="--control-torch-threads 2" $flags || exit 1
    [ "$evaluate" = 1 ] || exit 0
    while [ ! -e "$out/base.json" ] && kill -0 "$base_pid" 2>/dev/null; do sleep 5; done
    # shellcheck disable=SC2086
    python3 bench/robot_loop_hour.py --phase evaluate --output-dir "$out/$name" "${common[@]}" $flags
  ) 2>&1 | progress_free > "$out/$name.log" &
done
wait
touch "$out/done"
