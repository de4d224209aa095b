#!/usr/bin/env bash
# A rank that never starts (here the second process of the job is `sleep`, not epserve): MPI's
# start-up waits for it, and cannot be polled, so the watchdog must end the job within the
# --timeout with one line naming the rank and the call. Bounded by `timeout 60`.
# Usage: rank_never_starts_test.sh EPSERVE WORKDIR
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --out "$WORK/model" >/dev/null || exit 1
run_failing_job 60 40 "its second rank never started" "${MPIRUN[@]}" -np 1 "$EPSERVE" \
  generate --model "$WORK/model" --prompt-ids 1,2,3 --max-tokens 4 --timeout 5 : -np 1 sleep 45 ||
  exit 1
grep -q "epserve: rank 0: timed out after 5 s in MPI start-up" "$WORK/out" ||
  { echo "FAIL: no line naming the rank and the start-up"; exit 1; }
echo ok
