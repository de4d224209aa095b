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
start=$(date +%s)
timeout 60 "${MPIRUN[@]}" -np 1 "$EPSERVE" generate --model "$WORK/model" --prompt-ids 1,2,3 \
  --max-tokens 4 --timeout 5 : -np 1 sleep 45 >"$WORK/out" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
echo "exit code $rc after ${elapsed}s"
tail -5 "$WORK/out"
if [[ $rc -eq 0 ]]; then echo "FAIL: the job succeeded without its second rank"; exit 1; fi
if [[ $rc -eq 124 || $elapsed -gt 40 ]]; then echo "FAIL: job took ${elapsed}s (limit 40 s)"; exit 1; fi
grep -q "epserve: rank 0: timed out after 5 s in MPI start-up" "$WORK/out" ||
  { echo "FAIL: no line naming the rank and the start-up"; exit 1; }
echo "ok: ended in ${elapsed}s with exit code $rc"
