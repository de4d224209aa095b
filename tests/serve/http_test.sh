#!/usr/bin/env bash
# serve.http: the server's HTTP/1.1 layer over raw sockets (tests/serve/http_client.py):
# pipelined requests answered in order (a stream among them), keep-alive and its idle timeout,
# HEAD, a head trickling in past --http-header-timeout cut with 408 however short its gaps, a
# stalled body 408, long targets 414, 405, a bad request line 400, Expect: 100-continue.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
start_server "$WORK/server.log" --model "$WORK/model" --http-header-timeout 2 \
  --http-read-timeout 1 --http-keep-alive 1
timeout 60 /usr/bin/python3 "$HERE/http_client.py" "$PORT" || fail "see the lines above"
[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/health") == 200 ]] || fail "/health afterwards"
# The scrape's own connection is open while /metrics is rendered; the bound is --http-threads.
metrics=$(curl -s --max-time 5 "$BASE/metrics")
grep -Eq '^epserve:http_connections\{[^}]*\} [1-9]' <<<"$metrics" || fail "epserve:http_connections while scraping"
grep -Eq '^epserve:http_connections_bound\{[^}]*\} [1-9]' <<<"$metrics" || fail "epserve:http_connections_bound"
stop_server
echo "serve.http: ok"
