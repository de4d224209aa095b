#!/usr/bin/env bash
# serve.hostile: request bodies that used to take the whole server down get a clean 400 and the
# server keeps serving. A completion with an unknown field nested 60,000 arrays deep (120 KB) and
# a chat message whose content is nested 20,000 deep (40 KB) both overflowed the stack in a
# recursive walk of the parsed body (exit 139); the depth is now bounded before parsing. A
# chunked body over --max-body-bytes gets 413 without the server reading it whole.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
start_server "$WORK/server.log" --model "$WORK/model"
PY=/usr/bin/python3

post_file() {  # post_file ROUTE FILE -> status printed, body in $WORK/out.json
  curl -s --max-time 30 -o "$WORK/out.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    --data-binary "@$2" "$BASE$1" || true
}
expect_file() {  # expect_file STATUS ROUTE FILE [CODE]
  local got
  got=$(post_file "$2" "$3")
  kill -0 "$SERVER_PID" 2>/dev/null || { tail -5 "$WORK/server.log"; fail "$3 killed the server"; }
  [[ $got == "$1" ]] || { head -c 300 "$WORK/out.json"; fail "$3: status $got, want $1"; }
  if [[ -n ${4:-} ]]; then
    $PY -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["code"] == sys.argv[2], e; print(e["message"])' \
      "$WORK/out.json" "$4" || fail "$3: wrong error body"
  fi
}

$PY - "$WORK" <<'PYEOF'
import json, sys
w = sys.argv[1]
deep = lambda n, inner: "[" * n + inner + "]" * n
open(f"{w}/deep_completion.json", "w").write(
    '{"x": ' + deep(60000, "") + ', "prompt": "hi", "max_tokens": 2}')
open(f"{w}/deep_chat.json", "w").write(
    '{"messages": [{"role": "user", "content": ' + deep(20000, '"hi"') + '}], "max_tokens": 2}')
open(f"{w}/deep_objects.json", "w").write(
    '{"prompt": "hi", "x": ' + '{"a": ' * 5000 + '1' + '}' * 5000 + '}')
# Brackets inside strings are text, not nesting: a prompt of 2,000 "[" is served.
open(f"{w}/brackets_in_string.json", "w").write(
    json.dumps({"prompt": "[" * 2000 + "{", "max_tokens": 2}))
# At the limit (64 levels counting the body's own object) a chat template variable holding
# arrays 62 deep is accepted (chat_template_kwargs: an object of any values).
open(f"{w}/at_limit.json", "w").write(
    '{"chat_template_kwargs": {"x": ' + deep(62, "") + '}, "max_tokens": 2, '
    '"messages": [{"role": "user", "content": "hi"}]}')
open(f"{w}/over_limit.json", "w").write(
    '{"x": ' + deep(64, "") + ', "prompt": "hi", "max_tokens": 2}')
PYEOF

expect_file 400 /v1/completions "$WORK/deep_completion.json" json_too_deep
expect_file 400 /v1/chat/completions "$WORK/deep_chat.json" json_too_deep
expect_file 400 /v1/completions "$WORK/deep_objects.json" json_too_deep
expect_file 400 /v1/completions "$WORK/over_limit.json" json_too_deep
expect_file 200 /v1/chat/completions "$WORK/at_limit.json"
expect_file 200 /v1/completions "$WORK/brackets_in_string.json"
# A body over --max-body-bytes (1 MiB by default) is refused with 413 whatever the transfer
# encoding, without being held in memory: a 50 MB chunked body used to be read whole (+246 MB).
$PY -c 'import sys; open(sys.argv[1], "w").write("{\"prompt\": \"" + "a" * 50_000_000 + "\"}")' "$WORK/big.json"
rss() { awk '/^VmRSS/ {print $2}' "/proc/$SERVER_PID/status"; }
before=$(rss)
for te in "Transfer-Encoding: chunked" "X-Plain: length"; do
  got=$(curl -s --max-time 30 -o "$WORK/out.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -H "$te" --data-binary "@$WORK/big.json" "$BASE/v1/completions" || true)
  [[ $got == 413 ]] || { head -c 300 "$WORK/out.json"; fail "50 MB body ($te): status $got, want 413"; }
  grep -q request_too_large "$WORK/out.json" || fail "413 without code request_too_large"
done
after=$(rss)
echo "RSS before/after the 50 MB bodies: $before / $after kB"
((after - before < 51200)) || fail "a refused body grew the server by $((after - before)) kB"
expect_file 200 /v1/chat/completions "$WORK/at_limit.json"

# 10,000 headers (each line short, which is all cpp-httplib bounded): 431, and still serving.
$PY -c '
import sys
with open(sys.argv[1], "w") as f:
    for i in range(10000):
        f.write("header = \"X-H%d: v\"\n" % i)' "$WORK/headers.cfg"
got=$(curl -s --max-time 30 -o "$WORK/out.json" -w '%{http_code}' -K "$WORK/headers.cfg" \
  -H 'Content-Type: application/json' -d '{"prompt": "hi", "max_tokens": 2}' "$BASE/v1/completions" || true)
[[ $got == 431 ]] || { head -c 300 "$WORK/out.json"; fail "10,000 headers: status $got, want 431"; }

# The same bodies again, several at once: still alive, still serving.
pids=()
for _ in 1 2 3 4; do
  post_file /v1/chat/completions "$WORK/deep_chat.json" >/dev/null &
  pids+=($!)
done
wait "${pids[@]}"
[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/health") == 200 ]] || fail "/health after the deep bodies"
expect_file 200 /v1/chat/completions "$WORK/at_limit.json"
stop_server
echo "serve.hostile: ok"
