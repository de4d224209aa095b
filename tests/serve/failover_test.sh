#!/usr/bin/env bash
# serve.failover: `serve --engines` over two engine services (`epserve engine`, one process
# each, one request running at a time). Killing one (SIGKILL) mid-stream: the router marks it
# down within seconds, the stream running on it is resumed on the other group where it stopped
# and completes (the client sees a pause, no error), the one still waiting there (no token
# yet) runs on the other group and completes, and new requests are served by the other group;
# killing both: requests get 503 and /health 503 within seconds; nothing hangs (every curl has
# --max-time).
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
exec 2> >(grep -v " Killed " >&2)  # bash reports the engines this test kills
start_engines 2 "$WORK/model" "$WORK/engine" --max-running 1
start_server "$WORK/server.log" --model "$WORK/model" --engines "$ENGINES" \
  --policy round_robin --health-interval-ms 200 --health-timeout-ms 500
# Both groups up (bounded wait: on a loaded machine a health check can time out once, at
# 500 ms, and the next one brings the group back).
for _ in $(seq 1 100); do
  [[ $(metric 'epserve:groups_up') == 2 ]] && break
  sleep 0.1
done
[[ $(metric 'epserve:groups_up') == 2 ]] || fail "not both groups up within 10 s"

complete() {  # complete OUT: a small greedy completion; prints the HTTP status
  curl -s --max-time 20 -o "$1" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt": [3, 4, 5], "max_tokens": 4, "temperature": 0}' "$BASE/v1/completions"
}
[[ $(complete "$WORK/a.json") == 200 ]] || fail "first request"

# Round robin from group 1: two long streams running (groups 1 and 0), two short ones waiting
# behind them (groups 1 and 0); then group 0's engine dies.
for i in 0 1 2 3; do
  tokens=$((i < 2 ? 3000 : 20))
  curl -sN --max-time 60 -H 'Content-Type: application/json' \
    -d "{\"prompt\": [4, 5], \"max_tokens\": $tokens, \"ignore_eos\": true, \"stream\": true}" \
    "$BASE/v1/completions" >"$WORK/stream-$i.txt" &
  eval "STREAM_$i=$!"
  sleep 0.3
done
for _ in $(seq 1 100); do
  [[ $(grep -c '^data: ' "$WORK/stream-0.txt" || true) -ge 3 && $(grep -c '^data: ' "$WORK/stream-1.txt" || true) -ge 3 ]] && break
  sleep 0.1
done
t0=$(date +%s%N)
kill -KILL "${ENGINE_PIDS[0]}"
for _ in $(seq 1 50); do
  [[ $(metric 'epserve:groups_up') == 1 ]] && break
  sleep 0.1
done
[[ $(metric 'epserve:groups_up') == 1 ]] || fail "the dead group is not marked down within 5 s"
down_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
# The streams: every one ran to its end, the one running on the dead group after a resume on
# the live group, the one waiting there after a retry.
for i in 0 1 2 3; do
  rc=0; eval "wait \$STREAM_$i" || rc=$?
  [[ $rc -eq 0 ]] || fail "stream $i: curl exited with $rc"
  tail -c 20 "$WORK/stream-$i.txt" | grep -q 'data: \[DONE\]' || fail "stream $i: no [DONE]"
done
errors=$( (grep -l '"error"' "$WORK"/stream-*.txt || true) | wc -l)
lengths=$(grep -l '"finish_reason":"length"' "$WORK"/stream-*.txt | wc -l)
[[ $errors == 0 && $lengths == 4 ]] || fail "want all four streams complete: $errors errors, $lengths complete"
grep -q "resuming it after [1-9][0-9]* tokens" "$WORK/server.log" || fail "the running stream was not resumed"
[[ $(metric 'epserve:resume_pause_seconds_count') -ge 1 ]] || fail "no resume counted in /metrics"
[[ $(metric 'epserve:router_retries_total') -ge 2 ]] || fail "the two requests of the dead group were not counted as retried"
# /health: still 200 (the live group serves), saying it is degraded.
[[ $(curl -s --max-time 5 -o "$WORK/health.txt" -w '%{http_code}' "$BASE/health") == 200 ]] || fail "/health with one group down"
grep -q "degraded: 1 of 2 engine groups down" "$WORK/health.txt" || fail "/health does not say degraded: $(cat "$WORK/health.txt")"
# New requests all go to the live group.
for i in 1 2 3 4; do
  [[ $(complete "$WORK/b$i.json") == 200 ]] || { cat "$WORK/b$i.json"; fail "request $i after one group died"; }
done

# The other engine dies too: 503 within seconds, /health 503, and the server stays up.
kill -KILL "${ENGINE_PIDS[1]}"
code=""
for _ in $(seq 1 50); do
  code=$(complete "$WORK/c.json")
  [[ $code == 503 ]] && break
  sleep 0.1
done
[[ $code == 503 ]] || fail "no 503 within 5 s of every group dying (last: $code)"
grep -q '"server_error"' "$WORK/c.json" || fail "503 without an OpenAI-style body"
if grep -q '127\.0\.0\.1' "$WORK/c.json"; then fail "the 503 shows an engine address: $(cat "$WORK/c.json")"; fi
[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/health") == 503 ]] || fail "/health is not 503"
stop_server
echo "serve.failover: dead group marked down in ${down_ms} ms; its streams resumed on the live group; 503 once none was up"
