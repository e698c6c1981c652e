#!/usr/bin/env bash
# GPU job (H200), issue 19: the pi0.5 fast path. First tests/rpent_agents/features/test_pi05_cuda.py
# (the full-size PI05 with random weights in bf16, fast path against eager, same noise), then
# bench/featurize.py on pi0.5 alone: eager, fast path, in process (raw observations -> z_rl) and
# the feature server over loopback, batch 1 and 64, each with its first call's seconds (compile
# and CUDA-graph capture on the fast path) and the fast path's warmup_s per batch bucket.
# Carry .carry_pi (bash bench/device/pack_carry.sh pi); $OUT gets tests.log and featurize.log.
#   bash bench/device/pi05_fast_path.sh [more bench/featurize.py arguments]
# SKIP_TESTS=1: the bench alone (e.g. a second call on the warm machine when one call would
# pass the 10-minute limit; the inductor cache in /tmp stays).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/pi_env.sh
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -rs -p no:cacheprovider tests/rpent_agents/features/test_pi05_cuda.py \
    > "$out/tests.log" 2>&1
  tail -n 5 "$out/tests.log"
fi
python3 bench/featurize.py --device cuda --dtype bfloat16 --size full --models pi05 "$@" 2>&1 \
  | tee "$out/featurize.log"
