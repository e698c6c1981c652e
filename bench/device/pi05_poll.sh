#!/usr/bin/env bash
# Companion of pi05_fast_path.sh on the GPU machine: wait up to SECONDS (default 560) for the
# detached job to finish (poll_job.sh), print its progress, and bring back everything it wrote
# so far ($JOB: logs, JSON lines, the compile cache listing) as one file, $OUT/job.tgz. Prints
# DONE when the job has finished.
#   bash bench/device/pi05_poll.sh [SECONDS]
set -uo pipefail
job="${JOB:-/tmp/job}"
status=$(JOB="$job" DONE_FILE="$job/DONE" bash "$(dirname "$0")/poll_job.sh" "${1:-560}")
cat "$job/steps.txt" 2>/dev/null
for log in "$job"/*.log; do
  [ -f "$log" ] || continue
  echo "--- $log"  # JSON rows (not the profile's per-kernel ones), warm-ups, errors
  grep -E '^\{|fast path:|Error|error' "$log" | grep -v '"kind": "kernel",' | tail -n 12
done
echo "$status"
