#!/usr/bin/env bash
# serve.slow_clients: 300 slowloris connections (headers one line every 2 s) while a normal
# client is answered within 5 s (/health, /v1/models, a completion): each connection has its
# own thread (serve/connection_queue.h). With --http-threads 50, connections beyond the bound
# get a fast 503 (too_many_connections) while /health is still answered, and service resumes
# once the slow ones are gone.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
SLOW=""
trap 'kill -KILL $SERVER_PID $SLOW 2>/dev/null || true' EXIT

# status PATH [BODY]: the HTTP status of a request that must be answered within 5 s.
status() {
  if [[ $# -gt 1 ]]; then
    curl -s --max-time 5 -o "$WORK/out.json" -w '%{http_code}' -H 'Content-Type: application/json' \
      -d "$2" "$BASE$1" || echo "timeout"
  else
    curl -s --max-time 5 -o "$WORK/out.json" -w '%{http_code}' "$BASE$1" || echo "timeout"
  fi
}
# slow N SECONDS: starts N slow connections in the background and waits until they are open.
slow() {
  /usr/bin/python3 "$HERE/slow_clients.py" "$PORT" "$1" "$2" >"$WORK/slow.log" 2>&1 &
  SLOW=$!
  for _ in $(seq 1 100); do grep -q '^open' "$WORK/slow.log" && return; sleep 0.1; done
  cat "$WORK/slow.log"; fail "the slow connections did not open"
}

start_server "$WORK/server.log" --model "$WORK/model"
slow 300 8
sleep 1
for path in /health /v1/models; do
  [[ $(status $path) == 200 ]] || fail "$path under 300 slow connections: $(cat "$WORK/out.json")"
done
[[ $(status /v1/completions '{"prompt": "hi", "max_tokens": 2}') == 200 ]] ||
  fail "a completion under 300 slow connections: $(cat "$WORK/out.json")"
wait $SLOW
stop_server

start_server "$WORK/server2.log" --model "$WORK/model" --http-threads 50
slow 60 6
sleep 1
got=$(status /v1/completions '{"prompt": "hi", "max_tokens": 2}')
[[ $got == 503 ]] || fail "beyond --http-threads 50: status $got, want 503"
grep -q too_many_connections "$WORK/out.json" || fail "503 without code too_many_connections"
[[ $(status /health) == 200 ]] || fail "/health beyond the connection bound"
wait $SLOW
sleep 0.5
[[ $(status /v1/completions '{"prompt": "hi", "max_tokens": 2}') == 200 ]] ||
  fail "not served again once the slow connections closed: $(cat "$WORK/out.json")"
stop_server
echo "serve.slow_clients: ok"
