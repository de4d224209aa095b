#!/usr/bin/env bash
# serve.self_heal: `serve --np 4 --tp 2` (two DP groups of two ranks) under 24 concurrent
# streams for 40 s while a random engine rank is SIGKILLed every 15 s and another SIGSTOPped
# for 6 s (tests/serve/chaos.py; scripts/chaos_soak.sh is the long version). The server
# restarts the world after each death and resumes every interrupted stream where it stopped:
# every request completes with its full max_tokens and no error event, greedy ones
# token-identical to an undisturbed run (or first differing at a top-2 tie, as serve.load allows
# an EP world); the restarts are counted in /metrics; no engine
# process is left after SIGTERM. (serve.world: with --max-restarts-per-minute 0 a dead rank
# is not replaced and requests get 503.)
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
exec 2> >(grep -v " Killed " >&2)
engines() { pgrep -f "epserve engine --model $WORK/model" || true; }

start_server "$WORK/server.log" --model "$WORK/model" --np 4 --tp 2 --health-interval-ms 200
timeout 200 python3 "$HERE/chaos.py" --port "$PORT" --engine-pattern "epserve engine --model $WORK/model" \
  --streams 24 --duration 40 --cases 12 --kill-every 15 --stop-every 25 --stop-for 6 \
  --request-timeout 120 >"$WORK/chaos.json" || { cat "$WORK/chaos.json"; tail -30 "$WORK/server.log"; fail "chaos.py"; }
restarts=$(metric 'epserve:engine_world_restarts_total')
resumed=$(metric 'epserve:resume_pause_seconds_count')
[[ $restarts -ge 1 ]] || fail "no world restart counted in /metrics"
[[ $resumed -ge 1 ]] || fail "no resumed stream counted in /metrics"
grep -q "restarting it (restart 1)" "$WORK/server.log" || fail "no restart in the log"
stop_server 60
# Ranks the launcher leaves behind end with it (bounded wait: they exit on their own once mpirun
# is gone, or serve ends them).
for _ in $(seq 1 100); do
  [[ -z $(engines) ]] && break
  sleep 0.1
done
[[ -z $(engines) ]] || fail "engine processes left 10 s after serve exited: $(engines)"
summary=$(head -1 "$WORK/chaos.json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print("%d requests, %d kills, %d stops, longest pause p99 %.1f s, %d greedy outputs first differing at a top-2 tie" % (d["requests"], d["kills"], d["stops"], d["pause_p99_s"], d["greedy_ties"]))')

echo "serve.self_heal: $summary, $restarts restarts, $resumed streams resumed, none lost"
