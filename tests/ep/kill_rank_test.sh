#!/usr/bin/env bash
# One rank dies (SIGKILL) mid-run; the job must end within 30 s with a non-zero exit code and
# no hang. Usage: kill_rank_test.sh EPSERVE WORKDIR
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --out "$WORK/model" >/dev/null || exit 1
start=$(date +%s)
timeout 120 "${MPIRUN[@]}" -np 4 "$EPSERVE" generate --model "$WORK/model" --prompt-ids 1,2,3 --prompt-ids 4 \
  --prompt-ids 5,6 --max-tokens 200 --timeout 20 --fault-kill-rank 2 --fault-kill-step 3 >"$WORK/out" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "exit code $rc after ${elapsed}s"
tail -5 "$WORK/out"
if [[ $rc -eq 0 ]]; then echo "FAIL: job succeeded although rank 2 was killed"; exit 1; fi
if [[ $rc -eq 124 || $elapsed -gt 30 ]]; then echo "FAIL: job took ${elapsed}s (limit 30s)"; exit 1; fi
grep -qi "rank 2\|process rank 2\|\[\[.*\],2\]" "$WORK/out" || { echo "FAIL: the dead rank is not named"; exit 1; }
if grep -Eq "rank ([0-9]+): rank \1:" "$WORK/out"; then
  echo "FAIL: a message names its rank twice"; exit 1
fi
echo "ok: ended in ${elapsed}s with exit code $rc"
