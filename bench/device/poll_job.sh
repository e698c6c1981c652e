#!/usr/bin/env bash
# On the GPU machine: wait up to SECONDS (default 560) for a detached job to write its done
# file, then pack the job's folder into one file of $OUT (a call brings back at most 8 files)
# and print DONE, or "running" when the time ran out first (call it again in the next command).
#   JOB=/tmp/job DONE_FILE=/tmp/job/learn/done bash bench/device/poll_job.sh 560
# JOB (default /tmp/job): the folder to pack, into $OUT/$(basename $JOB).tgz; DONE_FILE
# (default $JOB/done): the file the job writes last. Files larger than MAX_FILE_MB (default 12)
# are left out of the pack (a call brings back at most 16 MiB per file) and listed; a pack
# larger than that comes back in parts of MAX_FILE_MB: `cat job.tgz.part_* | tar -xz` here.
# A call brings back 64 MiB in all: LEAVE_OUT (a file name pattern, e.g. '*.pt') keeps
# matching files out of the pack (copy the few you need into $OUT in a later call).
set -uo pipefail
job="${JOB:-/tmp/job}"
done_file="${DONE_FILE:-$job/done}"
out="${OUT:-/tmp/out}"
deadline=$((SECONDS + ${1:-560}))
mkdir -p "$out"
while [ ! -e "$done_file" ] && [ "$SECONDS" -lt "$deadline" ]; do
  sleep 15
done
too_large=$(find "$job" -type f -size +"${MAX_FILE_MB:-12}"M 2>/dev/null)
[ -z "$too_large" ] || echo "left out (over ${MAX_FILE_MB:-12} MB): $too_large"
pack="$out/$(basename "$job").tgz"
find "$job" -type f ! -size +"${MAX_FILE_MB:-12}"M ! -name "${LEAVE_OUT:-}" -printf '%P\n' 2>/dev/null \
  | tar -czf "$pack" -C "$job" -T - 2>/dev/null
if [ "$(stat -c %s "$pack")" -gt $((${MAX_FILE_MB:-12} * 1024 * 1024)) ]; then
  split -b "${MAX_FILE_MB:-12}m" "$pack" "$pack.part_" && rm "$pack"
fi
[ -e "$done_file" ] && echo DONE || echo "running ($(date +%T))"
