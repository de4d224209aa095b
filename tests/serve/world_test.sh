#!/usr/bin/env bash
# serve.world: `serve --np 2` starts a two-rank expert-parallel engine world (2 DP groups)
# through mpirun and routes over both. Checks: both groups serve requests (round robin); a
# SIGTERM while a request streams lets it finish (drain) and stops the whole world, no engine
# process left; and in a second world without restarts (--max-restarts-per-minute 0; the
# restarts are serve.self_heal's), killing one rank (SIGKILL: mpirun then ends the world)
# makes requests answer 503 and /health 503 within seconds while the server stays up.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
engines() { pgrep -f "epserve engine --model $WORK/model" || true; }

start_server "$WORK/server.log" --model "$WORK/model" --np 2 --policy round_robin
grep -q 'group 1 is up' "$WORK/server.log" || fail "group 1 not up"
for i in 1 2 3 4; do
  code=$(curl -s --max-time 20 -o "$WORK/r$i.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"prompt\": [$i, 7, 9], \"max_tokens\": 6, \"temperature\": 0}" "$BASE/v1/completions")
  [[ $code == 200 ]] || { cat "$WORK/r$i.json"; fail "request $i: $code"; }
done
for g in 0 1; do
  [[ $(metric "epserve:prompt_tokens_total{group=\"$g\"}") -gt 0 ]] || fail "group $g got no request"
done
# SIGTERM during a 1500-token stream: it completes (finish_reason length), then everything stops.
# The drain takes as long as the rest of the stream: seconds here, up to ten on a loaded machine.
curl -sN --max-time 60 -H 'Content-Type: application/json' \
  -d '{"prompt": [4, 5], "max_tokens": 1500, "ignore_eos": true, "stream": true}' \
  "$BASE/v1/completions" >"$WORK/drain.txt" &
CURL_PID=$!
for _ in $(seq 1 100); do
  [[ $(grep -c '^data: ' "$WORK/drain.txt" || true) -ge 2 ]] && break
  sleep 0.05
done
stop_server 60
grep -q 'draining 1 requests' "$WORK/server.log" || fail "the stream had ended before SIGTERM: no drain tested"
wait $CURL_PID || fail "the draining stream failed"
grep -q '"finish_reason":"length"' "$WORK/drain.txt" || { tail -c 300 "$WORK/drain.txt"; fail "the stream was cut, not drained"; }
[[ -z $(engines) ]] || fail "engine processes left after SIGTERM: $(engines)"

# A second world; one rank dies.
start_server "$WORK/server2.log" --model "$WORK/model" --np 2 --max-restarts-per-minute 0
victim=$(engines | head -1)
[[ -n $victim ]] || fail "no engine process found"
kill -KILL "$victim"
code=""
for _ in $(seq 1 100); do
  code=$(curl -s --max-time 10 -o "$WORK/x.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt": [1, 2], "max_tokens": 2}' "$BASE/v1/completions")
  [[ $code == 503 ]] && break
  sleep 0.1
done
[[ $code == 503 ]] || fail "no 503 within 10 s of a rank dying (last: $code)"
[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/health") == 503 ]] || fail "/health is not 503"
grep -q "not restarting it" "$WORK/server2.log" || fail "the log does not say it will not restart"
stop_server
[[ -z $(engines) ]] || fail "engine processes left: $(engines)"
echo "serve.world: 2 groups served; SIGTERM drained a running stream; a dead rank gave 503"
