#!/usr/bin/env bash
# serve.engine_token: the engine service checks a shared secret. An engine started with
# --engine-token-file serves a scheduler given the same file, and nothing to one without it
# (the group never comes up; serve gives up naming the refused token); an engine asked to listen on a non-loopback address without a
# token refuses to start, naming why.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$WORK/token"
chmod 600 "$WORK/token"

out=$("$EPSERVE" engine --model "$WORK/model" --host 0.0.0.0 --port 0 --kv-memory 16M --threads 1 2>&1) &&
  fail "an engine listened on 0.0.0.0 without a token"
grep -q "without a token" <<<"$out" || { echo "$out"; fail "the refusal does not say why"; }

start_engines 1 "$WORK/model" "$WORK/engine" --engine-token-file "$WORK/token"
start_server "$WORK/with.log" --model "$WORK/model" --engines "$ENGINES" --engine-token-file "$WORK/token"
code=$(curl -s --max-time 30 -o "$WORK/out.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"prompt": "hi", "max_tokens": 3}' "$BASE/v1/completions")
[[ $code == 200 ]] || { cat "$WORK/out.json"; fail "with the token: status $code"; }
stop_server

# Without the token the scheduler never sees the group up, and says why.
if "$EPSERVE" serve --port 0 --model "$WORK/model" --engines "$ENGINES" --startup-timeout 3 >"$WORK/without.log" 2>&1; then
  fail "serve started without the engine token"
fi
grep -q "missing or wrong engine token" "$WORK/without.log" || { cat "$WORK/without.log"; fail "the scheduler does not say the token was refused"; }
stop_engines
echo "serve.engine_token: ok"
