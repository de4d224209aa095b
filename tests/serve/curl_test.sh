#!/usr/bin/env bash
# serve.curl: the OpenAI routes through plain curl: completions and chat, whole and streamed
# (SSE ending in data: [DONE]), stop strings, each bad request's status and OpenAI-style error
# body (the server keeps serving), and --api-key (401s generate nothing). PRESET (default tiny)
# picks the model: tiny-v32 serves DeepSeek-V3.2's sparse attention (chat prompts are longer
# than its index_topk of 16).
# Usage: curl_test.sh EPSERVE WORKDIR [PRESET]
set -euo pipefail
EPSERVE=$1 WORK=$2 PRESET=${3:-tiny}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset "$PRESET" --seed 2 --out "$WORK/model" >/dev/null
start_server "$WORK/server.log" --model "$WORK/model" --served-model-name tiny --max-body-bytes 4096
PY=/usr/bin/python3
post() {  # post ROUTE BODY [curl args...] -> body in $WORK/out.json, status printed
  local route=$1 body=$2
  shift 2
  curl -s --max-time 30 -o "$WORK/out.json" -w '%{http_code}' -H "Content-Type: ${CT:-application/json}" \
    "$@" -d "$body" "$BASE$route"
}

[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/health") == 200 ]] || fail "/health"
curl -s --max-time 5 "$BASE/v1/models" | $PY -c '
import json, sys; m = json.load(sys.stdin)
assert m["object"] == "list" and m["data"][0]["id"] == "tiny", m' || fail "/v1/models"

# A whole and a streamed greedy completion of the same prompt give the same text.
REQ='{"model": "tiny", "prompt": "Hello, world", "max_tokens": 12, "temperature": 0, "ignore_eos": true}'
[[ $(post /v1/completions "$REQ") == 200 ]] || { cat "$WORK/out.json"; fail "completion"; }
cp "$WORK/out.json" "$WORK/whole.json"
SREQ='{"model": "tiny", "prompt": "Hello, world", "max_tokens": 12, "temperature": 0, "ignore_eos": true,
       "stream": true, "stream_options": {"include_usage": true}}'
curl -sN --max-time 30 -H 'Content-Type: application/json' -d "$SREQ" "$BASE/v1/completions" >"$WORK/stream.txt"
$PY - "$WORK/whole.json" "$WORK/stream.txt" <<'PYEOF' || fail "streamed completion differs"
import json, sys
whole = json.load(open(sys.argv[1]))
c = whole["choices"][0]
assert whole["object"] == "text_completion" and c["finish_reason"] == "length", whole
u = whole["usage"]
assert u["completion_tokens"] == 12 and u["total_tokens"] == u["prompt_tokens"] + 12, u
assert "cached_tokens" in u["prompt_tokens_details"], u
raw = open(sys.argv[2]).read()
assert raw.endswith("data: [DONE]\n\n"), raw[-200:]
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events), events
chunks = [json.loads(e[6:]) for e in events[:-1]]
text = "".join(ch["choices"][0]["text"] for ch in chunks if ch["choices"])
assert text == c["text"], (text, c["text"])
assert chunks[-2]["choices"][0]["finish_reason"] == "length", chunks[-2]
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 12, chunks[-1]
print("stream == whole:", json.dumps(text))
PYEOF

# Chat, streamed: the first delta carries the role, the deltas add up to the whole answer.
CHAT='{"model": "tiny", "messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 8,
       "temperature": 0, "ignore_eos": true'
[[ $(post /v1/chat/completions "$CHAT}") == 200 ]] || { cat "$WORK/out.json"; fail "chat"; }
curl -sN --max-time 30 -H 'Content-Type: application/json' -d "$CHAT, \"stream\": true}" \
  "$BASE/v1/chat/completions" >"$WORK/chat.txt"
$PY - "$WORK/out.json" "$WORK/chat.txt" <<'PYEOF' || fail "chat stream"
import json, sys
whole = json.load(open(sys.argv[1]))
assert whole["object"] == "chat.completion", whole
msg = whole["choices"][0]["message"]
raw = open(sys.argv[2]).read()
assert raw.endswith("data: [DONE]\n\n")
chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e and e != "data: [DONE]"]
assert chunks[0]["object"] == "chat.completion.chunk"
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
assert text == msg["content"], (text, msg)
assert chunks[-1]["choices"][0]["finish_reason"] == "length"
PYEOF

# Content-part arrays of text (what OpenAI's clients send) answer exactly as the same text as a
# string; another part type is refused naming it; an assistant turn with content null and tool
# calls is accepted.
cp "$WORK/out.json" "$WORK/chat_string.json"
PARTS='{"model": "tiny", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi there"}]}],
        "max_tokens": 8, "temperature": 0, "ignore_eos": true}'
[[ $(post /v1/chat/completions "$PARTS") == 200 ]] || { cat "$WORK/out.json"; fail "content parts"; }
$PY -c '
import json, sys
a = json.load(open(sys.argv[1]))["choices"][0]["message"]["content"]
b = json.load(open(sys.argv[2]))["choices"][0]["message"]["content"]
assert a == b, (a, b)' "$WORK/chat_string.json" "$WORK/out.json" || fail "content parts differ from the string"
[[ $(post /v1/chat/completions '{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}') == 400 ]] ||
  fail "an image part was not refused"
grep -q "image_url" "$WORK/out.json" || fail "the refusal does not name the part type"
TOOLS='{"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}], "max_tokens": 4}'
[[ $(post /v1/chat/completions "$TOOLS") == 200 ]] || { cat "$WORK/out.json"; fail "content null with tool_calls"; }

# Chat logprobs: one entry per token with its bytes and the top 2; greedy picks the top one.
[[ $(post /v1/chat/completions "$CHAT, \"logprobs\": true, \"top_logprobs\": 2}") == 200 ]] || fail "chat logprobs"
$PY -c '
import json, sys
r = json.load(open(sys.argv[1])); content = r["choices"][0]["logprobs"]["content"]
assert len(content) == r["usage"]["completion_tokens"] == 8, r
for e in content:
    assert len(e["top_logprobs"]) == 2 and isinstance(e["bytes"], list), e
    assert abs(e["logprob"] - e["top_logprobs"][0]["logprob"]) < 1e-5, e
' "$WORK/out.json" || fail "chat logprobs shape"

# Stop strings: the output ends right before the first occurrence, finish_reason "stop".
LONG='{"prompt": [1, 5, 9], "max_tokens": 24, "temperature": 0, "ignore_eos": true'
[[ $(post /v1/completions "$LONG}") == 200 ]] || fail "long completion"
STOP=$($PY -c 'import json,sys; t=json.load(open(sys.argv[1]))["choices"][0]["text"]; assert len(t) >= 6, t; print(json.dumps(t[3:5]))' "$WORK/out.json")
EXPECT=$($PY -c 'import json,sys; t=json.load(open(sys.argv[1]))["choices"][0]["text"]; s=json.loads(sys.argv[2]); print(json.dumps(t[:t.find(s)]))' "$WORK/out.json" "$STOP")
for stream in false true; do
  curl -sN --max-time 30 -H 'Content-Type: application/json' -d "$LONG, \"stop\": [\"zzzz\", $STOP], \"stream\": $stream}" \
    "$BASE/v1/completions" >"$WORK/stop.txt"
  $PY - "$WORK/stop.txt" "$EXPECT" "$stream" <<'PYEOF' || fail "stop string (stream=$stream)"
import json, sys
raw, expect = open(sys.argv[1]).read(), json.loads(sys.argv[2])
if sys.argv[3] == "true":
    chunks = [json.loads(e[6:]) for e in raw.split("\n\n") if e and e != "data: [DONE]"]
    text = "".join(c["choices"][0]["text"] for c in chunks)
    finish = chunks[-1]["choices"][0]["finish_reason"]
else:
    c = json.loads(raw)["choices"][0]
    text, finish = c["text"], c["finish_reason"]
assert text == expect and finish == "stop", (text, expect, finish)
PYEOF
done

# Both stop-string requests count as finished by "stop", as their clients were told, even when the
# engine ended one by length before the cancel for its stop string reached it (a fast machine).
for _ in $(seq 1 50); do
  [[ $(metric 'epserve:request_success_total{model_name="tiny",finished_reason="stop"}') -ge 2 ]] && break
  sleep 0.1
done
[[ $(metric 'epserve:request_success_total{model_name="tiny",finished_reason="stop"}') -ge 2 ]] ||
  fail "stop-string requests not counted as stop"

# Bad requests: status and an OpenAI-style error body each; the server keeps serving.
expect_error() {  # expect_error STATUS ROUTE BODY [curl args...]
  local want=$1 route=$2 body=$3
  shift 3
  local got
  got=$(post "$route" "$body" "$@")
  [[ $got == "$want" ]] || { cat "$WORK/out.json"; fail "$body: status $got, want $want"; }
  $PY -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["message"] and e["type"], e' \
    "$WORK/out.json" || fail "$body: no OpenAI error body"
}
expect_error 400 /v1/completions '{"prompt": "hi", '
CT=text/plain expect_error 400 /v1/completions '{"prompt": "hi"}'
expect_error 404 /v1/completions '{"model": "gpt-4", "prompt": "hi"}'
expect_error 400 /v1/completions '{"max_tokens": 4}'
expect_error 400 /v1/chat/completions '{"max_tokens": 4}'
expect_error 400 /v1/completions '{"prompt": 12}'
expect_error 400 /v1/completions '{"prompt": "hi", "max_tokens": "4"}'
expect_error 400 /v1/completions '{"prompt": "hi", "max_tokens": 0}'
expect_error 400 /v1/completions '{"prompt": "hi", "max_tokens": 100000}'
expect_error 400 /v1/completions '{"prompt": "hi", "n": 17}'
expect_error 400 /v1/completions '{"prompt": "hi", "best_of": 2}'
expect_error 400 /v1/completions '{"prompt": "hi", "temperature": 2.5}'
expect_error 400 /v1/completions '{"prompt": [1, 2, 99999]}'
expect_error 400 /v1/chat/completions '{"messages": "hi"}'
# A chat template error tells the client what failed, not where the model lives on the server.
expect_error 400 /v1/chat/completions '{"messages": [{"role": "user"}]}'
grep -q "chat_template" "$WORK/out.json" || fail "the template error does not say what failed"
if grep -q "$WORK" "$WORK/out.json"; then fail "the template error shows the server path: $(cat "$WORK/out.json")"; fi
expect_error 413 /v1/completions "{\"prompt\": \"$(head -c 6000 /dev/zero | tr '\0' a)\"}"
expect_error 404 /v1/nothing '{}'
[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/health") == 200 ]] || fail "/health after errors"
[[ $(post /v1/completions '{"prompt": "hi", "max_tokens": 2}') == 200 ]] || fail "completion after errors"
stop_server

# --api-key: /v1/* need the key (401 otherwise, nothing generated); /health and /metrics stay open.
start_server "$WORK/server-key.log" --model "$WORK/model" --api-key s3cret
before=$(metric 'epserve:generation_tokens_total')
expect_error 401 /v1/completions '{"prompt": "hi", "max_tokens": 4}'
expect_error 401 /v1/completions '{"prompt": "hi", "max_tokens": 4}' -H 'Authorization: Bearer wrong'
[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/v1/models") == 401 ]] || fail "models without key"
[[ $(metric 'epserve:generation_tokens_total') == "$before" ]] || fail "a 401 request generated tokens"
[[ $(post /v1/completions '{"prompt": "hi", "max_tokens": 4}' -H 'Authorization: Bearer s3cret') == 200 ]] ||
  fail "the right key was refused"
[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/health") == 200 ]] || fail "/health with a key"
stop_server

# --max-concurrent-requests 1: a second request while a stream runs gets 429 (an OpenAI-style
# rate_limit_exceeded body); once the stream is gone, requests are served again.
start_server "$WORK/server-limit.log" --model "$WORK/model" --max-concurrent-requests 1 --drain-timeout 1
curl -sN --max-time 30 -H 'Content-Type: application/json' \
  -d '{"prompt": [4, 5], "max_tokens": 4000, "ignore_eos": true, "stream": true}' \
  "$BASE/v1/completions" >"$WORK/long.txt" &
LONG=$!
for _ in $(seq 1 100); do
  [[ $(grep -c '^data: ' "$WORK/long.txt" || true) -ge 2 ]] && break
  sleep 0.05
done
expect_error 429 /v1/completions '{"prompt": "hi", "max_tokens": 2}'
grep -q '"rate_limit_exceeded"' "$WORK/out.json" || fail "429 without code rate_limit_exceeded"
kill $LONG 2>/dev/null || true
wait $LONG 2>/dev/null || true
code=""
for _ in $(seq 1 50); do
  code=$(post /v1/completions '{"prompt": "hi", "max_tokens": 2}')
  [[ $code == 200 ]] && break
  sleep 0.1
done
[[ $code == 200 ]] || fail "still refused after the stream ended: $code"
stop_server
echo "serve.curl: ok"
