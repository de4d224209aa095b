#!/usr/bin/env bash
# serve.stream.cuda: `epserve serve --device cuda` (or any serve flags given after WORK) answers
# a chat completion whole and streamed (SSE ending in data: [DONE]) with the same greedy text,
# and a plain completion likewise, through curl. Exit 77 (skipped) with the reason where the
# server cannot use a GPU. scripts/gpu_check.sh runs it on the GPU machine when node (and so
# the openai client of serve.openai_client) is missing there.
set -euo pipefail
EPSERVE=$1 WORK=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
skip_without_gpu "$WORK/model" "$@"
start_server "$WORK/server.log" --model "$WORK/model" --served-model-name tiny "$@"
grep -E '^device' "$WORK/server.log" || true
PY=/usr/bin/python3
for route in chat/completions completions; do
  if [[ $route == chat/completions ]]; then
    REQ='{"model": "tiny", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 16, "temperature": 0, "ignore_eos": true'
  else
    REQ='{"model": "tiny", "prompt": "Hello, world", "max_tokens": 16, "temperature": 0, "ignore_eos": true'
  fi
  code=$(curl -s --max-time 30 -o "$WORK/whole.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "$REQ}" "$BASE/v1/$route")
  [[ $code == 200 ]] || { cat "$WORK/whole.json"; fail "$route: status $code"; }
  curl -sN --max-time 30 -H 'Content-Type: application/json' -d "$REQ, \"stream\": true}" \
    "$BASE/v1/$route" >"$WORK/stream.txt"
  $PY - "$WORK/whole.json" "$WORK/stream.txt" "$route" <<'PYEOF' || fail "$route: stream differs from the whole answer"
import json, sys
whole = json.load(open(sys.argv[1]))
chat = sys.argv[3].startswith("chat")
c = whole["choices"][0]
text = c["message"]["content"] if chat else c["text"]
assert whole["usage"]["completion_tokens"] == 16 and c["finish_reason"] == "length", whole
raw = open(sys.argv[2]).read()
assert raw.endswith("data: [DONE]\n\n"), raw[-200:]
chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e and e != "data: [DONE]"]
part = lambda ch: (ch["choices"][0]["delta"].get("content", "") if chat else ch["choices"][0]["text"])
streamed = "".join(part(ch) for ch in chunks if ch["choices"])
assert streamed == text, (streamed, text)
print(sys.argv[3], "streamed == whole:", json.dumps(text))
PYEOF
done
stop_server
echo "serve.stream: ok ($*)"
