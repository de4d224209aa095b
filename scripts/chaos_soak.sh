#!/usr/bin/env bash
# The chaos soak of issue 40 (docs/serving-api.md, "Failure handling"): `epserve serve --np 4
# --tp 2` (two DP groups) on the tiny model, 200 concurrent streams of mixed lengths for
# DURATION seconds (default 300) while a random engine rank is SIGKILLed every 60 s and another
# SIGSTOPped for 20 s every 60 s (30 s out of phase). Passes when no request is lost (each ends
# with its full max_tokens, no error event), greedy ones are token-identical to an undisturbed
# run, the restarts are in /metrics, and no engine process is left afterwards. Prints the
# client's summary (requests, longest pause in a stream p50/p99/max) and the server's counters.
# Loopback only, every wait bounded. Usage: scripts/chaos_soak.sh [DURATION] [STREAMS]
# (serve.self_heal in CTest is the short version: 24 streams, 40 s.)
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${1:-300} STREAMS=${2:-200}
EPSERVE=${EPSERVE:-build/tools/epserve}
WORK=$(mktemp -d /tmp/epserve-chaos.XXXXXX)
source tests/serve/lib.sh
exec 2> >(grep -v " Killed " >&2)
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
engines() { pgrep -f "epserve engine --model $WORK/model" || true; }
start_server "$WORK/server.log" --model "$WORK/model" --np 4 --tp 2 --health-interval-ms 200 \
  --max-concurrent-requests 1024
echo "chaos_soak: serving on port $PORT (log $WORK/server.log); $STREAMS streams for $DURATION s"
rc=0
timeout $((DURATION + 600)) python3 tests/serve/chaos.py --port "$PORT" \
  --engine-pattern "epserve engine --model $WORK/model" --streams "$STREAMS" --duration "$DURATION" \
  --cases 24 --kill-every 60 --stop-every 60 --stop-first 30 --stop-for 20 \
  --request-timeout 300 | tee "$WORK/chaos.txt" || rc=1
for m in engine_world_restarts_total resume_pause_seconds_count resume_pause_seconds_sum router_retries_total; do
  echo "chaos_soak: epserve:$m = $(metric "epserve:$m")"
done
curl -s --max-time 5 "$BASE/metrics" | grep '^epserve:resume_pause_seconds_bucket' >"$WORK/pause_buckets.txt" || true
stop_server 120
for _ in $(seq 1 100); do
  [[ -z $(engines) ]] && break
  sleep 0.1
done
left=$(engines)
[[ -z $left ]] || { echo "FAIL: engine processes left: $left"; rc=1; }
[[ $rc == 0 ]] && echo "chaos_soak: passed ($WORK)" || echo "chaos_soak: FAILED ($WORK)"
exit $rc
