#!/usr/bin/env bash
# GPU job of issue 52 (RLT within an hour of robot time), in two phases, all runs of a phase
# side by side (4 workers each; their speeds are not a run's own):
#   1. choose: `rpent-stage2 robot-hour` and three variants (VARIANTS), one run each, 30k env
#      steps, evaluations every 5k on the validation seeds 0..99 only (no test seeds);
#   2. report: the variant with the best mean success over its last two validation
#      evaluations (ties: the shorter critical phase) with three training seeds, and the same
#      without any expert, each ending on the test seeds 50000..50255 (base and actor).
# Nothing is chosen on the test seeds. Uses the embedded checkpoint. Carry .carry.
# $OUT (default /tmp/out) gets choose/N_robot-hour/ and report/N_robot-hour/ (results.json,
# success_curve.png, weights.pt, train.log per run), choice.txt and done.
#   (OUT=/tmp/job setsid nohup bash bench/device/robot_hour.sh > /tmp/job.log 2>&1 < /dev/null &)
#   JOB=/tmp/job bash bench/device/poll_job.sh 560
# PHASES="choose" or "report" runs one phase (report then needs CHOICE="robot-hour ...flags").
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-/tmp/out}"
mkdir -p "$out"
variants=(
  "robot-hour"
  "robot-hour --stage2.acting-samples 0"
  "robot-hour --stage2.update-epoch 80"
  "robot-hour --stage2.gamma 0.95"
)
if [ -n "${VARIANTS:-}" ]; then IFS='|' read -r -a variants <<< "$VARIANTS"; fi
phases="${PHASES:-choose report}"
export CONCURRENT=1 NUM_ENVS="${NUM_ENVS:-4}" TOTAL_ENV_STEPS=30000 EVAL_EVERY=5000 SKIP_THROUGHPUT=1
if [[ " $phases " == *" choose "* ]]; then
  specs=()
  for variant in "${variants[@]}"; do specs+=("$variant --test-seed None"); done
  OUT="$out/choose" bash bench/device/stage2_presets.sh "${specs[@]}"
  # the best mean of the last two validation evaluations; ties: the shorter critical phase
  CHOICE=$(python3 - "$out/choose" "${variants[@]}" <<'EOF'
import json, sys
from pathlib import Path
folder, variants = Path(sys.argv[1]), sys.argv[2:]
scores = []
for index, variant in enumerate(variants, start=1):
    results = json.loads(next(folder.glob(f"{index}_*/results.json")).read_text())
    rates = [point["success_rate"] for point in results["evals"]][-2:]
    phase = results["evals"][-1]["critical_phase_median_steps"] or 99
    scores.append((sum(rates) / len(rates), -phase, variant))
    print(f"{variant}: last two {rates}, critical phase {phase}", file=sys.stderr)
print(max(scores)[2])
EOF
  )
  echo "$CHOICE" > "$out/choice.txt"
  echo "chosen on the validation seeds: $CHOICE"
fi
if [[ " $phases " == *" report "* ]]; then
  choice="${CHOICE:-$(cat "$out/choice.txt")}"
  OUT="$out/report" bash bench/device/stage2_presets.sh \
    "$choice" \
    "$choice --train-seed 300000 --stage2.seed 11" \
    "$choice --train-seed 600000 --stage2.seed 23" \
    "$choice --env.no-expert-takeover"
fi
touch "$out/done"
