#!/usr/bin/env bash
# Impossible layouts, and a rank that fails to load, are one clear error (printed once, by rank 0,
# naming the rank at fault) and exit code 1 on every rank.
# Usage: bad_layout_test.sh EPSERVE WORKDIR
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --out "$WORK/model" >/dev/null || exit 1
fail=0
check() {  # check NP WANT ARGS...
  local np=$1 want=$2 out rc count
  shift 2
  out=$(timeout 60 "${MPIRUN[@]}" -np "$np" "$EPSERVE" generate --model "$WORK/model" --prompt-ids 1,2 --max-tokens 2 "$@" 2>&1)
  rc=$?
  count=$(grep -c "epserve: error: .*$want" <<<"$out")
  if [[ $rc -eq 0 || $count -ne 1 ]]; then
    echo "FAIL np=$np $*: rc=$rc, error lines matching [$want]: $count"; echo "$out" | head -5; fail=1
  else
    echo "ok   np=$np $*: $(grep 'epserve: error' <<<"$out")"
  fi
}
check 3 "-np 3 is not a multiple of --tp 2" --tp 2
check 3 "--tp 3 does not divide the model.s 4 attention heads" --tp 3
check 4 "DP group 0 (ranks 0-1) would span machines 0 and 1" --tp 2 --ranks-per-node 1
check 4 "--ranks-per-node 3 does not divide -np 4" --ranks-per-node 3
check 2 "placement.json: cannot open\|placement.json" --placement "$WORK/placement.json"
check 4 "rank 2: .*injected load failure" --fault-fail-load-rank 2
exit $fail
