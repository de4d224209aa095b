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
run_failing_job 90 40 "rank 1 was stopped" "${MPIRUN[@]}" -np 2 "$EPSERVE" generate \
  --model "$WORK/model" --prompt-ids 1,2,3 --prompt-ids 4 --max-tokens 200 --timeout 5 \
  --fault-kill-rank 1 --fault-kill-step 3 --fault-stop || exit 1
grep -q "rank 0: timed out after 5 s waiting for" "$WORK/out" ||
  { echo "FAIL: rank 0 does not say what it waited for"; exit 1; }
no_doubled_rank_prefix || exit 1
echo ok
