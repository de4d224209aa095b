#!/usr/bin/env bash
# serve.disconnect: a client killed in the middle of a long stream cancels its request: the
# engine is idle again (no request running, no cache block referenced) within a few seconds,
# the request counts as cancelled, and the server serves the next request; the same for a
# client of a non-streamed request (counted as HTTP 499). A SIGTERM during a stream ends it and
# the server exits 0.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
start_server "$WORK/server.log" --model "$WORK/model" --drain-timeout 1
curl -sN --max-time 60 -H 'Content-Type: application/json' \
  -d '{"prompt": [1, 2, 3], "max_tokens": 4000, "temperature": 0, "ignore_eos": true, "stream": true}' \
  "$BASE/v1/completions" >"$WORK/stream.txt" &
CURL_PID=$!
for _ in $(seq 1 100); do
  [[ $(grep -c '^data: ' "$WORK/stream.txt" || true) -ge 5 ]] && break
  sleep 0.1
done
[[ $(grep -c '^data: ' "$WORK/stream.txt" || true) -ge 5 ]] || fail "no stream within 10 s"
[[ $(metric 'epserve:num_requests_running') == 1 ]] || fail "the request is not running"
kv=$(metric 'epserve:kv_cache_usage_perc')
/usr/bin/python3 -c "import sys; sys.exit(0 if float('$kv') > 0 else 1)" || fail "no cache in use while streaming"
{ kill -KILL $CURL_PID && wait $CURL_PID; } 2>/dev/null || true
grep -q 'data: \[DONE\]' "$WORK/stream.txt" && fail "the stream finished before the client was killed"
for _ in $(seq 1 50); do
  [[ $(metric 'epserve:num_requests_running') == 0 && $(metric 'epserve:kv_cache_usage_perc') == 0 ]] && break
  sleep 0.1
done
[[ $(metric 'epserve:num_requests_running') == 0 ]] || fail "the request still runs 5 s after its client died"
[[ $(metric 'epserve:kv_cache_usage_perc') == 0 ]] || fail "cache blocks still referenced"
[[ $(metric 'epserve:request_success_total{model_name="model",finished_reason="cancelled"}') == 1 ]] ||
  fail "not counted as cancelled"
generated=$(metric 'epserve:generation_tokens_total')
[[ $generated -lt 4000 ]] || fail "all 4000 tokens were generated"
code=$(curl -s --max-time 30 -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"prompt": [1, 2], "max_tokens": 2}' "$BASE/v1/completions")
[[ $code == 200 ]] || fail "next request: $code"
# The same for a non-streamed request (nothing is written until its end, so serve watches the
# client's socket): cancelled within seconds of its client dying, counted as cancelled.
before=$(metric 'epserve:generation_tokens_total')
curl -s --max-time 60 -H 'Content-Type: application/json' \
  -d '{"prompt": [1, 2, 3], "max_tokens": 4000, "temperature": 0, "ignore_eos": true}' \
  "$BASE/v1/completions" >"$WORK/whole.txt" &
CURL_PID=$!
for _ in $(seq 1 100); do
  [[ $(metric 'epserve:num_requests_running') == 1 ]] && break
  sleep 0.1
done
[[ $(metric 'epserve:num_requests_running') == 1 ]] || fail "the non-streamed request is not running"
sleep 0.5
{ kill -KILL $CURL_PID && wait $CURL_PID; } 2>/dev/null || true
for _ in $(seq 1 50); do
  [[ $(metric 'epserve:num_requests_running') == 0 ]] && break
  sleep 0.1
done
[[ $(metric 'epserve:num_requests_running') == 0 ]] || fail "the non-streamed request still runs 5 s after its client died"
[[ $(metric 'epserve:request_success_total{model_name="model",finished_reason="cancelled"}') == 2 ]] ||
  fail "the non-streamed request was not counted as cancelled"
whole_generated=$(( $(metric 'epserve:generation_tokens_total') - before ))
[[ $whole_generated -lt 4000 ]] || fail "all 4000 tokens of the non-streamed request were generated"
[[ $(metric 'epserve:http_requests_total{status="499"}') == 1 ]] || fail "not counted as 499"
# SIGTERM during a stream longer than --drain-timeout: it ends (error chunk, then [DONE]) and
# the server exits 0.
curl -sN --max-time 30 -H 'Content-Type: application/json' \
  -d '{"prompt": [4, 5], "max_tokens": 4000, "ignore_eos": true, "stream": true}' \
  "$BASE/v1/completions" >"$WORK/shutdown.txt" &
CURL_PID=$!
for _ in $(seq 1 100); do
  [[ $(grep -c '^data: ' "$WORK/shutdown.txt" || true) -ge 3 ]] && break
  sleep 0.1
done
stop_server
rc=0; wait $CURL_PID || rc=$?
[[ $rc -eq 0 ]] || { tail -c 300 "$WORK/shutdown.txt"; fail "curl exited with $rc at shutdown"; }
tail -c 20 "$WORK/shutdown.txt" | grep -q 'data: \[DONE\]' || fail "no [DONE] at shutdown"
echo "serve.disconnect: stream cancelled after $generated tokens, non-streamed after $whole_generated"
