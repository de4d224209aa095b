#!/usr/bin/env bash
# The main job. Sets everything up (packages, build), then starts the whole deployment with one
# command: `epserve serve --np 2` launches a two-rank expert-parallel engine world through
# mpirun (two DP groups, the routed experts split between the ranks) behind the
# OpenAI-compatible HTTP server and its cache-aware request router, on the embedded default
# model (the `tiny` preset with its tokenizer and chat template, made on first use). Then one
# demo chat request with curl, whose streamed text is printed as it arrives, the server's
# routing and cache metrics, and a clean shutdown (SIGTERM: drain, stop the engine world).
# Extra arguments go to `epserve serve` (e.g. --np 4 --tp 2, --model DIR, --port 8000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
EPSERVE=$BUILD_DIR/tools/epserve
LOG=$(mktemp /tmp/epserve-serve.XXXXXX.log)
"$EPSERVE" serve --np 2 --port 0 --kv-memory 512M "$@" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  grep -q '^epserve: serving ' "$LOG" && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; echo "run.sh: the server exited"; exit 1; }
  sleep 0.5
done
cat "$LOG"
URL=$(sed -n 's|^epserve: serving .* on \(https\?://[^ ]*\) .*|\1|p' "$LOG")
[[ -n $URL ]] || { echo "run.sh: no 'serving' line after 300 s"; exit 1; }

echo
echo "\$ curl $URL/v1/chat/completions  (stream: true)"
curl -sN --max-time 60 "$URL/v1/chat/completions" -H 'Content-Type: application/json' -d '{
  "messages": [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "Write one sentence about experts."}],
  "max_tokens": 48, "temperature": 0.7, "seed": 1, "stream": true,
  "stream_options": {"include_usage": true}}' |
  /usr/bin/python3 -u -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("data: ") or line.startswith("data: [DONE]"):
        continue
    chunk = json.loads(line[6:])
    for c in chunk["choices"]:
        sys.stdout.write(c["delta"].get("content") or "")
        sys.stdout.flush()
    if chunk.get("usage"):
        u = chunk["usage"]
        print("\n[usage: %d prompt, %d completion tokens]" % (u["prompt_tokens"], u["completion_tokens"]))
'
echo
echo "\$ curl $URL/metrics  (excerpt)"
curl -s --max-time 10 "$URL/metrics" | grep -E '^epserve:(groups_up|router_decisions_total|prompt_tokens_total|generation_tokens_total)' || true

echo
kill -TERM $SERVER
trap - EXIT
rc=0
wait $SERVER || rc=$?
tail -n 2 "$LOG"
echo "run.sh: the server exited with status $rc"
exit $rc
