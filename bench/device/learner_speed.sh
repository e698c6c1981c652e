#!/usr/bin/env bash
# GPU job (H200): the Stage 2 learner tests on CUDA (CUDA-graph replay against the eager update
# included), then bench/learner_speed.py (Stage 2 against SB3 SAC, z_dim 2048, batch 512).
# Carry .carry (bench/device/pack_carry.sh); $OUT gets tests.log and learner_speed.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
python3 -m pytest -q -p no:cacheprovider tests/rpent_agents/stage2 > "$out/tests.log" 2>&1
tail -n 15 "$out/tests.log"
python3 bench/learner_speed.py --device cuda --updates 3000 2>&1 | tee "$out/learner_speed.txt"
