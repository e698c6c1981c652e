#!/usr/bin/env bash
# Companion of pi05_fast_path.sh on the GPU machine: wait up to SECONDS (default 560) for the
# detached job to finish, printing its progress, then pack everything it wrote so far ($JOB:
# logs, JSON lines, the compile cache listing) into $OUT/pi05_job.tgz (one file: a call brings
# back at most 8). Prints DONE when the job has finished.
#   bash bench/device/pi05_poll.sh [SECONDS]
set -uo pipefail
job="${JOB:-/tmp/job}"
out="${OUT:-/tmp/out}"
deadline=$((SECONDS + ${1:-560}))
mkdir -p "$out"
while [ ! -e "$job/DONE" ] && [ "$SECONDS" -lt "$deadline" ]; do
  sleep 20
done
cat "$job/steps.txt" 2>/dev/null
for log in "$job"/*.log; do
  [ -f "$log" ] || continue
  echo "--- $log"  # JSON rows (not the profile's per-kernel ones), warm-ups, errors
  grep -E '^\{|fast path:|Error|error' "$log" | grep -v '"kind": "kernel",' | tail -n 12
done
tar -czf "$out/pi05_job.tgz" -C "$job" . 2>/dev/null
[ -e "$job/DONE" ] && echo DONE || echo "running ($(date +%T))"
