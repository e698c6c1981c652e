#!/usr/bin/env bash
# GPU job (H200), issue 28: the pi0.5 fast path, compiled once. Full-size PI05 with random
# weights in bf16, batch 1 and 64, one compile cache for the whole job (RPENT_COMPILE_CACHE_DIR,
# default /tmp/rpent_compile: /tmp outlives the job on a held machine):
#   1. first_start: bench/featurize.py, fast path (compiles buckets 1 and 64: ~90 s each),
#      in process (raw observations -> z_rl + chunk) and the feature server over loopback (a new
#      process started after them, a restart from the cache: it loads bucket 1 before it
#      listens and bucket 64 in its first batch-64 request; since_server_spawn_s, goal <= 60 s);
#   2. second_start: bench/pi05_profile.py, a new process: each bucket's warm-up from the cache
#      (first-call seconds and the process's age, goal <= 60 s), then torch.profiler over 3 warm
#      calls per batch (kernels by device time, classes, device idle gaps, launch calls);
#   2b. remote_repeat: bench/featurize.py's remote path alone, a second feature-server restart
#      from the cache, its batch 1 timed three times in a row (100 calls each: the rows' per-call
#      server milliseconds and the machine's busy cores tell a start-up transient from a
#      steady cost);
#   3. with RUN_TESTS=1: tests/rpent_agents/features/test_pi05_cuda.py (bucket 4 compiled,
#      recorded with the fused RL token, against eager) and test_graphed_cuda.py (the built-in
#      model's CUDA graphs) and test_compile_cache_cuda.py (a start from the cache starts no
#      compile workers);
#   3b. baseline: step 1's fast and in-process paths with --grouped-attention False (Gemma's
#      key/value head copied to every query head, as the stock attention does: the library
#      before grouped_attention), the A/B of the same lease (two more compiles);
#   4. dynamic_batch: bench/featurize.py's fast path at batch 8 then 64 with --dynamic-batch
#      (one compile for both; bucket 64 "shared"), against step 1's static bucket 64;
#   5. short_prompt: bench/featurize.py's fast and in-process paths keeping 64 of the 200
#      prompt slots (--prompt-slots 64: two more compiles; the stand-in prompts fill 50).
# Every step writes its log and its JSON lines under $JOB (default /tmp/job), outside the tree;
# pi05_poll.sh packs them into one file of $OUT. Carry .carry_pi (pack_carry.sh pi). Start it
# detached and poll (a job longer than the 10-minute command limit, ../shared/DEVICE.md):
#   (setsid nohup bash bench/device/pi05_fast_path.sh > /tmp/job.log 2>&1 < /dev/null &)
#   bash bench/device/pi05_poll.sh 560      # then again in each next call until it says DONE
# STEPS="second_start" runs a subset (e.g. on a warm machine whose cache is already there);
# DEVICE, DTYPE, SIZE and BATCH_SIZES override the H200 run's (a CPU dry run of the job:
# DEVICE=cpu DTYPE=float32 SIZE=small BATCH_SIZES=1).
set -uo pipefail
cd "$(dirname "$0")/../.."
job="${JOB:-/tmp/job}"
mkdir -p "$job"
source bench/device/pi_env.sh
export RPENT_COMPILE_CACHE_DIR="${RPENT_COMPILE_CACHE_DIR:-/tmp/rpent_compile}"
# the JSON lines' file names start with the card (h100, h200; cpu in a dry run)
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -oiE 'h[0-9]+' | head -n1)
card=$(echo "${card:-cpu}" | tr '[:upper:]' '[:lower:]')
read -ra batch_sizes <<< "${BATCH_SIZES:-1 64}"
common=(--device "${DEVICE:-cuda}" --dtype "${DTYPE:-bfloat16}" --size "${SIZE:-full}")
common+=(--batch-sizes "${batch_sizes[@]}")
run_step() {  # name, command...: its log and exit status under $job
  local name=$1
  shift
  echo "== $name start $(date +%T)" | tee -a "$job/steps.txt"
  "$@" > "$job/$name.log" 2>&1
  echo "== $name rc=$? end $(date +%T)" | tee -a "$job/steps.txt"
}
for step in ${STEPS:-first_start remote_repeat tests baseline second_start short_prompt dynamic_batch}; do
  case $step in
    first_start)
      run_step first_start python3 bench/featurize.py "${common[@]}" --models pi05 \
        --pi05-paths fast in-process remote --jsonl "$job/${card}_first_start.jsonl" \
        --label "first start (compiles)" ;;
    second_start)
      run_step second_start python3 bench/pi05_profile.py "${common[@]}" \
        --jsonl "$job/${card}_second_start_profile.jsonl" ;;
    remote_repeat)
      run_step remote_repeat python3 bench/featurize.py "${common[@]}" --models pi05 \
        --pi05-paths remote --batch-sizes 1 1 1 --iterations 100 \
        --jsonl "$job/${card}_remote_repeat.jsonl" --label "server restart, batch 1 three times" ;;
    baseline)
      run_step baseline python3 bench/featurize.py "${common[@]}" --models pi05 \
        --pi05-paths fast in-process --grouped-attention False \
        --jsonl "$job/${card}_baseline.jsonl" --label "no-grouped-attention baseline" ;;
    dynamic_batch)
      run_step dynamic_batch python3 bench/featurize.py "${common[@]}" --models pi05 \
        --pi05-paths fast --batch-sizes 8 "${batch_sizes[-1]}" --dynamic-batch \
        --jsonl "$job/${card}_dynamic_batch.jsonl" --label "dynamic batch" ;;
    short_prompt)
      run_step short_prompt python3 bench/featurize.py "${common[@]}" --models pi05 \
        --pi05-paths fast in-process --prompt-slots 64 --jsonl "$job/${card}_short_prompt.jsonl" \
        --label "64 prompt slots" ;;
    tests)
      [ "${RUN_TESTS:-0}" = 1 ] && run_step tests python3 -m pytest -q -rs -p no:cacheprovider \
        tests/rpent_agents/features/test_pi05_cuda.py \
        tests/rpent_agents/features/test_graphed_cuda.py \
        tests/rpent_agents/features/test_compile_cache_cuda.py ;;
  esac
done
du -sh "$RPENT_COMPILE_CACHE_DIR" > "$job/compile_cache_size.txt" 2>&1
python3 -m rpent_agents.features.compile_cache >> "$job/compile_cache_size.txt" 2>&1
touch "$job/DONE"
