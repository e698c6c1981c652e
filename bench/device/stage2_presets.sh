#!/usr/bin/env bash
# GPU job (H200) of the learning and throughput issues: the raw state-only env steps/s of the
# workers (the physics bound, bench/stage2_throughput.py --no-loop --raw-state-only), then one
# full `rpent-stage2` run per argument, in turn: each argument is a preset and its extra flags
# (16 workers, GPU rendering and features, 300k env steps, evaluations of 100 held-out seeds at
# the start and every 100k; the argument's flags come last and override these). Uses
# /tmp/ckpt when the machine holds stage1_peg.sh's checkpoint, else the embedded default.
# Carry .carry (first call of a lease).
# $OUT (default /tmp/out) gets raw_state.json, and per run a folder N_PRESET/ with train.log,
# results.json, success_curve.png, weights.pt (the acting actor: the Polyak average with
# --stage2.acting-actor-tau), trained_weights.pt (the trained actor) and stage2.tfevents;
# $OUT/done when all ended.
#   bash bench/device/stage2_presets.sh sample-efficient \
#     "sample-efficient --env.missed-grasp-chunks None"
# CONCURRENT=1 runs every argument at the same time (learning comparisons: their speeds are
# then not a run's own). CUDA_CHECK=1 first runs the learner's CUDA-graph tests
# ($OUT/cuda_learner.log) and, when they fail, adds --stage2.no-cuda-graphs to every run; then
# the test that the loop's queued updates read nothing back ($OUT/queued_updates.log: a report,
# no flag), and bench/train_step_launch.py ($OUT/train_step_launch.json; LAUNCH_STEPS timed
# train steps, default 50).
# A job longer than one device command (10 min) runs detached (../shared/DEVICE.md) and
# poll_job.sh brings its files back:
#   (OUT=/tmp/job setsid nohup bash bench/device/stage2_presets.sh ... > /tmp/job.log 2>&1 &)
#   bash bench/device/poll_job.sh 560       # then again in each next call until it says DONE
set -uo pipefail
cd "$(dirname "$0")/../.."
workers="${NUM_ENVS:-16}"
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
checkpoint=$(stage1_checkpoint)
extra_flags=""
if [ "${CUDA_CHECK:-0}" = 1 ]; then
  extra_flags=$(cuda_check tests/rpent_agents/stage2/test_stage2_cuda_graphs.py \
    --stage2.no-cuda-graphs "$out/cuda_learner.log")
  echo "learner CUDA-graph tests: $(tail -n 1 "$out/cuda_learner.log") ${extra_flags}"
  cuda_check tests/rpent_agents/stage2/test_stage2_queued_updates.py "" "$out/queued_updates.log" \
    > /dev/null
  echo "queued-updates test: $(tail -n 1 "$out/queued_updates.log")"
  python3 bench/train_step_launch.py --device "$DEVICE" --steps "${LAUNCH_STEPS:-50}" \
    > "$out/train_step_launch.json" 2> "$out/train_step_launch.err"
  echo "train step launch: $(cat "$out/train_step_launch.json")"
fi
if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
  python3 bench/stage2_throughput.py --num-envs "$workers" --render-backend "$RENDER" \
    --feature-device "$DEVICE" --checkpoint "$checkpoint" --raw-steps "${RAW_STEPS:-800}" \
    --no-loop --raw-state-only 2> "$out/raw_state.err" > "$out/raw_state.json"
  cat "$out/raw_state.json"
fi
run_spec() {  # index, spec: one rpent-stage2 run, its files under $out/INDEX_PRESET/
  local index=$1 words started run_out run_dir
  read -r -a words <<< "$2"
  run_out="$out/${index}_${words[0]}"
  run_dir="/tmp/rlt_runs/$(basename "$out")/${index}_${words[0]}"
  mkdir -p "$run_out"
  echo "checkpoint: $checkpoint; rpent-stage2 $2" > "$run_out/train.log"
  if [ -e "$run_dir" ]; then  # an earlier job's run: never copy its files as this one's
    echo "$run_dir exists (an earlier job): remove it or set OUT to another folder name" \
      | tee -a "$run_out/train.log"
    return 1
  fi
  started=$(date +%s)
  # The spec's own flags come last, so a spec may override the job's (e.g. --num-envs 32).
  python3 -m rpent_agents.stage2.train "${words[0]}" --output-dir "$run_dir" \
    --env.checkpoint "$checkpoint" --env.render-backend "$RENDER" \
    --env.feature-device "$DEVICE" --num-envs "$workers" \
    --total-env-steps "${TOTAL_ENV_STEPS:-300000}" --eval-every-env-steps "${EVAL_EVERY:-100000}" \
    --num-eval-episodes "${EVAL_SEEDS:-100}" "${words[@]:1}" 2>&1 \
    | progress_free >> "$run_out/train.log"
  echo "command wall time: $(($(date +%s) - started)) s" >> "$run_out/train.log"
  cp "$run_dir/results.json" "$run_dir/success_curve.png" "$run_dir/run/weights.pt" "$run_out/"
  python3 bench/device/trained_actor_weights.py "$run_dir/run" "$run_out/trained_weights.pt"
  cat "$run_dir"/tensorboard/events.* > "$run_out/stage2.tfevents"
  tail -n 3 "$run_out/train.log"
}
index=0
for spec in "$@"; do
  index=$((index + 1))
  spec="$spec $extra_flags"
  if [ "${CONCURRENT:-0}" = 1 ]; then run_spec "$index" "$spec" & else run_spec "$index" "$spec"; fi
done
wait
touch "$out/done"
