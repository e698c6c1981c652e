#!/usr/bin/env bash
# GPU job (H200) of the run-time issue, before a Stage 2 run: the CUDA checks of the code the
# loop's speed rests on, then its parts' speed, each into $OUT (default /tmp/out):
#   1. cuda_tests.log: the built-in VLA's graphed featurizer equals eager, replays refill their
#      buffers, one capture per bucket (tests/rpent_agents/features/test_graphed_cuda.py), and the
#      Stage 2 learner's captured updates (tests/rpent_agents/stage2/test_stage2_cuda_graphs.py);
#   2. featurize_graphed.jsonl: bench/featurize.py, the built-in model eager against graphed at
#      batch 1, 8 and 16 (first call = capture, then timed calls; their ratio);
#   3. eval_speed.json: bench/eval_speed.py, one evaluation of the 100 held-out seeds with the
#      16 workers in lockstep against workers stepped as they answer (same per-seed outcomes).
#   4. env_step_speed.json: bench/env_step_speed.py, one peg env's steps/s with RPent's CPU
#      checks against ManiSkill's own code (state, expert-driven and rgb modes; their ratios).
#   stage2_flags: what a Stage 2 run started after this job adds to its flags:
#      "--env.no-feature-cuda-graphs" when the featurizer's CUDA tests failed,
#      "--stage2.no-cuda-graphs" when the learner's did (eager updates), else empty.
# ~4-5 min. Carry .carry (first call of a lease). Then a Stage 2 run: stage2_presets.sh.
#   bash bench/device/stage2_fast_path.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
: > "$out/stage2_flags"
: > "$out/cuda_tests.log"
cuda_check tests/rpent_agents/features/test_graphed_cuda.py --env.no-feature-cuda-graphs \
  "$out/cuda_tests.log" >> "$out/stage2_flags"
cuda_check tests/rpent_agents/stage2/test_stage2_cuda_graphs.py --stage2.no-cuda-graphs \
  "$out/cuda_tests.log" >> "$out/stage2_flags"
[ ! -s "$out/stage2_flags" ] || echo "CUDA tests failed; the next runs get $(cat "$out/stage2_flags")"
tail -n 3 "$out/cuda_tests.log"
python3 bench/featurize.py --device "$DEVICE" --models builtin-graphed --batch-sizes 1 8 16 \
  --jsonl "$out/featurize_graphed.jsonl" --label h200 > "$out/featurize.log" 2>&1
tail -n 4 "$out/featurize.log"
python3 bench/eval_speed.py --num-envs "${NUM_ENVS:-16}" --num-seeds "${EVAL_SEEDS:-100}" \
  --render-backend "$RENDER" --feature-device "$DEVICE" 2> "$out/eval_speed.err" \
  | tee "$out/eval_speed.json"
python3 bench/env_step_speed.py --render-backend "$RENDER" 2> "$out/env_step_speed.err" \
  | tee "$out/env_step_speed.json"
