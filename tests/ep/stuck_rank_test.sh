#!/usr/bin/env bash
# One rank stops (SIGSTOP) mid-run: mpirun sees nothing wrong, so only the other ranks'
# deadlines (--timeout 5) can end the job. It must end within 40 s with a non-zero exit code,
# a line saying which wait timed out, and no message naming its rank twice ("rank 0: rank 0:").
# Bounded by `timeout 90`. Usage: stuck_rank_test.sh EPSERVE WORKDIR
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --out "$WORK/model" >/dev/null || exit 1
start=$(date +%s)
timeout 90 "${MPIRUN[@]}" -np 2 "$EPSERVE" generate --model "$WORK/model" --prompt-ids 1,2,3 \
  --prompt-ids 4 --max-tokens 200 --timeout 5 --fault-kill-rank 1 --fault-kill-step 3 \
  --fault-stop >"$WORK/out" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
echo "exit code $rc after ${elapsed}s"
tail -5 "$WORK/out"
if [[ $rc -eq 0 ]]; then echo "FAIL: job succeeded although rank 1 was stopped"; exit 1; fi
if [[ $rc -eq 124 || $elapsed -gt 40 ]]; then echo "FAIL: job took ${elapsed}s (limit 40 s)"; exit 1; fi
grep -q "rank 0: timed out after 5 s waiting for" "$WORK/out" ||
  { echo "FAIL: rank 0 does not say what it waited for"; exit 1; }
if grep -Eq "rank ([0-9]+): rank \1:" "$WORK/out"; then
  echo "FAIL: a message names its rank twice"; exit 1
fi
echo "ok: ended in ${elapsed}s with exit code $rc"
