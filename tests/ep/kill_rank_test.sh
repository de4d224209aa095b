#!/usr/bin/env bash
# One rank dies (SIGKILL) mid-run; the job must end within 30 s with a non-zero exit code and
# no hang. Usage: kill_rank_test.sh EPSERVE WORKDIR
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --out "$WORK/model" >/dev/null || exit 1
run_failing_job 120 30 "rank 2 was killed" "${MPIRUN[@]}" -np 4 "$EPSERVE" generate \
  --model "$WORK/model" --prompt-ids 1,2,3 --prompt-ids 4 --prompt-ids 5,6 --max-tokens 200 \
  --timeout 20 --fault-kill-rank 2 --fault-kill-step 3 || exit 1
grep -qi "rank 2\|process rank 2\|\[\[.*\],2\]" "$WORK/out" || { echo "FAIL: the dead rank is not named"; exit 1; }
no_doubled_rank_prefix || exit 1
echo ok
