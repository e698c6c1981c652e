#!/usr/bin/env bash
# GPU job (H200): featurization speed of the built-in VLA + RL token and of a pi0.5-size PI05
# with random weights (bf16, batch 1 latency and batch 64 throughput), bench/featurize.py.
# Carry .carry_pi (bash bench/device/pack_carry.sh pi); $OUT gets featurize.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/device/pi_env.sh
python3 bench/featurize.py --device cuda --dtype bfloat16 --size full "$@" 2>&1 \
  | tee "${OUT:-/tmp/out}/featurize.log"
