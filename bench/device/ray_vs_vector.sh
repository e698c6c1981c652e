#!/usr/bin/env bash
# GPU job (H200, 16 cores) of issue 18: training-loop env steps/s of --rollout ray against
# --rollout vector at 1, 2, 4, 8 and 16 workers, then both learning curves on the same seeds
# (bench/ray_vs_vector.py; GPU rendering, GPU features and learner). Two calls, since the
# ManiSkill carry and the Ray carry do not fit in one (64 MiB):
#   here: bash bench/device/pack_carry.sh && bash bench/device/pack_carry.sh ray
#   call 1 (carry .carry):     bash bench/device/unpack_carry.sh
#   call 2 (carry .carry_ray): bash bench/device/ray_vs_vector.sh [MAX_CURVE_MINUTES]
# The machine keeps /tmp/site between the calls while it is warm. $OUT gets ray_vs_vector.json
# and ray_vs_vector.log. WORKERS, CURVE_WORKERS, CURVE_ENV_STEPS, CURVE_EVAL_EVERY and
# CURVE_EVAL_SEEDS change the sizes; a local Ray of 16 CPUs runs at most 16 actors at once.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/out}"
mkdir -p "$out"
source bench/device/gpu_env.sh
[ -d /tmp/site/ray ] || bash bench/device/unpack_carry.sh ray
# shellcheck disable=SC2086  # one word per worker count
python3 bench/ray_vs_vector.py --workers ${WORKERS:-1 2 4 8 16} --render-backend "$RENDER" \
  --gpus-per-worker 0.05 --feature-device "$DEVICE" \
  --curve-workers "${CURVE_WORKERS:-16}" --curve-env-steps "${CURVE_ENV_STEPS:-100000}" \
  --curve-eval-every "${CURVE_EVAL_EVERY:-50000}" --curve-eval-episodes "${CURVE_EVAL_SEEDS:-50}" \
  --curve-max-minutes "${1:-3}" --output "$out/ray_vs_vector.json" \
  2>&1 | progress_free > "$out/ray_vs_vector.log"
tail -n 5 "$out/ray_vs_vector.log"
