#!/usr/bin/env bash
# serve.grammar_hostile[.np2]: structured-output requests that crashed the server (recursion in
# the grammar compiler), stopped its engine (a $ref fan-out, a long $ref chain, 10,000 forced
# tools compiled on the stepping thread) or pinned its memory (a cache bounded by count): each
# is answered (200, or 400 grammar_too_complex past the grammar's bounds) while a normal request
# still gets its answer within a few seconds, memory bounded, the caches within
# --grammar-cache-mb (tests/serve/grammar_hostile.py). ARGS (e.g. --np 2) go to `epserve serve`.
set -euo pipefail
EPSERVE=$1 WORK=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
start_server "$WORK/server.log" --model "$WORK/model" --max-body-bytes 8388608 --grammar-cache-mb 16 "$@"
timeout 400 /usr/bin/python3 "$HERE/grammar_hostile.py" "$BASE" "$SERVER_PID" "$@" ||
  { tail -20 "$WORK/server.log"; fail "see the lines above"; }
stop_server 30
echo "serve.grammar_hostile: ok"
