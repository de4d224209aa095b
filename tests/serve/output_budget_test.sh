#!/usr/bin/env bash
# serve.output_budget (issue 48 items 5, 9b): a whole (not streamed) answer with logprobs is
# written out as JSON text while it is built, never held as a JSON tree (which took ~16x the
# answer's bytes: three 135-byte requests for n 16 x 4000 tokens x 20 top logprobs took the
# server from 0.3 to 4.9 GB); the answer's size is bounded per request by
# n x max_tokens x (1 + top logprobs) <= --max-output-units (400 naming max_tokens, at once);
# /v1/tokenize with messages and a return_token_strs that is not a boolean is a 400, not a 500.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
PY=/usr/bin/python3
post() {  # post ROUTE BODY -> body in $WORK/out.json, status printed
  curl -s --max-time 30 -o "$WORK/out.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "$2" "$BASE$1" || true
}
expect_error() {  # expect_error STATUS PARAM ROUTE BODY: the status, an OpenAI error naming PARAM
  local got
  got=$(post "$3" "$4")
  [[ $got == "$1" ]] || { head -c 300 "$WORK/out.json"; fail "$4: status $got, want $1"; }
  $PY -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert e["param"] == sys.argv[2], e; print(e["message"])' \
    "$WORK/out.json" "$2" || fail "$4: the error does not name $2"
}

start_server "$WORK/server.log" --model "$WORK/model"

# /v1/tokenize: return_token_strs must be a boolean, with messages as with a prompt.
MSGS='"messages": [{"role": "user", "content": "hi"}]'
expect_error 400 return_token_strs /v1/tokenize "{\"prompt\": \"hi\", \"return_token_strs\": \"yes\"}"
expect_error 400 return_token_strs /v1/tokenize "{$MSGS, \"return_token_strs\": \"yes\"}"
expect_error 400 return_token_strs /v1/tokenize "{$MSGS, \"return_token_strs\": 1}"
[[ $(post /v1/tokenize "{$MSGS, \"return_token_strs\": true}") == 200 ]] || fail "tokenize messages"
$PY -c 'import json,sys; o=json.load(open(sys.argv[1])); assert len(o["token_strs"]) == o["count"] > 0, o' \
  "$WORK/out.json" || fail "tokenize messages: no token_strs"

# The whole answer's logprobs are the streamed ones (chat and completions, n 2): same tokens,
# logprobs, bytes and top lists.
for route in chat/completions completions; do
  if [[ $route == chat/completions ]]; then
    REQ="{$MSGS, \"logprobs\": true, \"top_logprobs\": 5"
  else
    REQ='{"prompt": "hi", "logprobs": 5'
  fi
  REQ="$REQ, \"n\": 2, \"max_tokens\": 40, \"temperature\": 0, \"ignore_eos\": true, \"return_token_ids\": true"
  [[ $(post "/v1/$route" "$REQ}") == 200 ]] || { cat "$WORK/out.json"; fail "$route whole"; }
  curl -sN --max-time 30 -H 'Content-Type: application/json' -d "$REQ, \"stream\": true}" \
    "$BASE/v1/$route" >"$WORK/stream.txt"
  $PY - "$WORK/out.json" "$WORK/stream.txt" <<'PYEOF' || fail "$route: whole and streamed logprobs differ"
import json, sys
whole = json.load(open(sys.argv[1]))
chunks = [json.loads(e[6:]) for e in open(sys.argv[2]).read().split("\n\n")
          if e.startswith("data: {")]
assert list(whole) == ["choices", "created", "id", "model", "object", "usage"], list(whole)
for c in whole["choices"]:
    mine = [ch["choices"][0] for ch in chunks if ch["choices"] and ch["choices"][0]["index"] == c["index"]]
    lps = [m["logprobs"] for m in mine if m.get("logprobs")]
    ids = sum((m.get("token_ids", []) for m in mine), [])
    assert c["token_ids"] == ids and len(ids) == 40, (c["token_ids"], ids)
    if "message" in c:
        assert c["logprobs"]["content"] == sum((l["content"] for l in lps), []), c["index"]
        assert len(c["logprobs"]["content"][0]["top_logprobs"]) == 5
    else:
        for k in ("tokens", "token_logprobs", "top_logprobs"):
            assert c["logprobs"][k] == sum((l[k] for l in lps), []), k
        # A whole answer's offsets add up its tokens' texts (in bytes); a stream's restart at
        # each chunk from the text given out so far (vLLM's too), which a lossy token text
        # (a part of a character) makes differ.
        off, t = c["logprobs"]["text_offset"], c["logprobs"]["tokens"]
        assert off[0] == 0 and all(off[i + 1] - off[i] == len(t[i].encode()) for i in range(len(t) - 1)), off
        assert c["text"] == "".join(m["text"] for m in mine)
print("whole == streamed logprobs,", len(whole["choices"]), "choices")
PYEOF
done

# Memory: a large allowed answer (n 4 x 2000 tokens x 20 top logprobs, ~12 MB of chat JSON,
# ~4 MB as completions) grows the server's peak RSS by at most 4x its bytes (a JSON tree took
# ~15x chat's, ~9x completions'). A same-shaped answer without logprobs first takes what the
# generation itself needs (cache pages, the engine's buffers).
rss() { awk "/^$1/ {print \$2}" "/proc/$SERVER_PID/status"; }
[[ $(post /v1/chat/completions "{$MSGS, \"n\": 4, \"max_tokens\": 2000, \"ignore_eos\": true}") == 200 ]] ||
  fail "warm-up"
for route in chat/completions completions; do
  if [[ $route == chat/completions ]]; then
    REQ="{$MSGS, \"logprobs\": true, \"top_logprobs\": 20"
  else
    REQ='{"prompt": "hi", "logprobs": 20'
  fi
  REQ="$REQ, \"n\": 4, \"max_tokens\": 2000, \"ignore_eos\": true}"
  before=$(rss VmRSS)
  echo 5 >"/proc/$SERVER_PID/clear_refs"  # VmHWM := VmRSS
  [[ $(post "/v1/$route" "$REQ") == 200 ]] || { head -c 300 "$WORK/out.json"; fail "$route: large answer"; }
  peak=$(rss VmHWM)
  bytes=$(stat -c %s "$WORK/out.json")
  $PY -c '
import json, sys
o = json.load(open(sys.argv[1])); c = o["choices"]
assert len(c) == 4 and o["usage"]["completion_tokens"] == 8000, o["usage"]
lp = c[3]["logprobs"]
n = len(lp["content"]) if "content" in lp else len(lp["tokens"])
top = lp["content"][-1]["top_logprobs"] if "content" in lp else lp["top_logprobs"][-1]
assert n == 2000 and len(top) >= 15, (n, len(top))' "$WORK/out.json" || fail "$route: large answer's shape"
  echo "$route: answer $((bytes / 1024)) kB, peak RSS $before -> $peak kB (+$(((peak - before) * 1024 * 100 / bytes))% of the answer)"
  (((peak - before) * 1024 <= 4 * bytes)) || fail "$route: the answer grew the server by $((peak - before)) kB, over 4x its $((bytes / 1024)) kB"
done
stop_server

# The bound: n x max_tokens x (1 + top logprobs) <= --max-output-units.
start_server "$WORK/server2.log" --model "$WORK/model" --max-output-units 100000
t0=$(date +%s%N)
expect_error 400 max_tokens /v1/chat/completions \
  "{$MSGS, \"n\": 4, \"max_tokens\": 2000, \"logprobs\": true, \"top_logprobs\": 20, \"ignore_eos\": true}"
grep -q -- '--max-output-units' "$WORK/out.json" || fail "the 400 does not name --max-output-units"
expect_error 400 max_tokens /v1/completions '{"prompt": "hi", "n": 2, "max_tokens": 3000, "logprobs": 20}'
expect_error 400 max_tokens /v1/completions '{"prompt": "hi", "n": 2, "max_tokens": 3000, "logprobs": 20, "stream": true}'
ms=$((($(date +%s%N) - t0) / 1000000))
echo "three over-bound requests refused in $ms ms"
((ms < 3000)) || fail "over-bound requests took $ms ms"
# At the bound: 4 x 1190 x 21 = 99,960 units.
[[ $(post /v1/completions '{"prompt": "hi", "n": 4, "max_tokens": 1190, "logprobs": 20}') == 200 ]] ||
  { cat "$WORK/out.json"; fail "a request within the bound"; }
# A chat request without max_tokens gets a default that fits: 100000 / (16 x 21) = 297 tokens.
[[ $(post /v1/chat/completions "{$MSGS, \"n\": 16, \"logprobs\": true, \"top_logprobs\": 20, \"ignore_eos\": true}") == 200 ]] ||
  { head -c 300 "$WORK/out.json"; fail "chat without max_tokens"; }
$PY -c 'import json,sys; o=json.load(open(sys.argv[1])); assert o["usage"]["completion_tokens"] == 16 * 297, o["usage"]' \
  "$WORK/out.json" || fail "chat's default max_tokens does not fit the bound"
stop_server
echo "PASS"
