#!/usr/bin/env bash
# serve.dsml: DeepSeek-V3.2's DSML tool calls end to end (docs/serving-api.md, "Tool calls"):
# the tiny model with its chat template removed (V3.2 ships none), --tool-call-format
# deepseek_v32 (so the prompt is the built-in V3.2 rendering) and a scripted output in V3.2's
# format (as encoding_dsv32.py writes an assistant turn with tool calls); whole and streamed,
# a conversation with a tool result, and tool_choice "required" / a named function forced.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
/usr/bin/python3 - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
p = work + "/model/tokenizer_config.json"
c = json.load(open(p))
c.pop("chat_template", None)
json.dump(c, open(p, "w"), ensure_ascii=False)
call = ("Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
        "<｜DSML｜parameter name=\"city\" string=\"true\">Paris \"centre\"</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_time\">\n\n</｜DSML｜invoke>\n"
        "</｜DSML｜function_calls>")
json.dump([{"when": "CALL_DSML", "output": call}], open(work + "/scripts.json", "w"),
          ensure_ascii=False)
PY
start_server "$WORK/server.log" --model "$WORK/model" --served-model-name tiny \
  --tool-call-format deepseek_v32 --scripted-outputs "$WORK/scripts.json"
grep -q 'tool calls: deepseek_v32' "$WORK/server.log" || { cat "$WORK/server.log"; fail "format not logged"; }
/usr/bin/python3 - "$BASE" <<'PY' || { tail -20 "$WORK/server.log"; exit 1; }
import json, sys, urllib.request, urllib.error
base = sys.argv[1]
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
          "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]

def post(body):
    req = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()

want = [("get_weather", {"city": "Paris \"centre\"", "days": 3}), ("get_time", {})]
msgs = [{"role": "user", "content": "CALL_DSML please"}]
status, text = post({"model": "tiny", "messages": msgs, "tools": tools})
assert status == 200, (status, text)
choice = json.loads(text)["choices"][0]
assert choice["finish_reason"] == "tool_calls", choice
assert choice["message"]["content"] == "Checking.", choice
got = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
       for c in choice["message"]["tool_calls"]]
assert got == want, got

# Streamed: the same calls from the deltas.
status, text = post({"model": "tiny", "messages": msgs, "tools": tools, "stream": True})
assert status == 200, (status, text)
content, calls = "", {}
for line in text.splitlines():
    if not line.startswith("data: ") or line == "data: [DONE]":
        continue
    for ch in json.loads(line[6:]).get("choices", []):
        d = ch.get("delta", {})
        content += d.get("content") or ""
        for t in d.get("tool_calls") or []:
            c = calls.setdefault(t["index"], {"name": "", "arguments": ""})
            c["name"] += t.get("function", {}).get("name") or ""
            c["arguments"] += t.get("function", {}).get("arguments") or ""
assert content == "Checking.", content
got = [(calls[i]["name"], json.loads(calls[i]["arguments"])) for i in sorted(calls)]
assert got == want, got

# A conversation with the call and its result renders with the built-in V3.2 prompt.
conv = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}]
for kwargs in ({}, {"thinking": True}):
    status, text = post({"model": "tiny", "messages": conv, "tools": tools, "max_tokens": 4,
                         "chat_template_kwargs": kwargs})
    assert status == 200, (status, text)
status, text = post({"model": "tiny", "messages": [{"role": "tool", "content": "x"}]})
assert status == 400 and "tool result" in text, (status, text)
# Forced calls: the grammar writes DSML (grammar/tool_calls.h), the parser reads it back.
for choice, names in (("required", {"get_weather", "get_time"}),
                      ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),
                      ({"type": "function", "function": {"name": "get_weather"}}, {"get_weather"})):
    for seed in (1, 2, 3):
        status, text = post({"model": "tiny", "messages": conv[:2], "tools": tools, "seed": seed,
                             "temperature": 1.0, "max_tokens": 300, "tool_choice": choice})
        assert status == 200, (status, text)
        c = json.loads(text)["choices"][0]
        assert c["finish_reason"] == "tool_calls", c
        calls = c["message"]["tool_calls"]
        assert calls, c
        for call in calls:
            assert call["function"]["name"] in names, calls
            args = json.loads(call["function"]["arguments"])
            assert isinstance(args, dict) and set(args) <= {"city", "days"}, args
            assert isinstance(args.get("city", ""), str), args
            assert isinstance(args.get("days", 0), int), args
            if call["function"]["name"] == "get_time":
                assert args == {}, args
            else:
                assert "city" in args, args  # required
# A schema DSML cannot write parameter by parameter is a 400 naming the tool.
odd = [{"type": "function", "function": {"name": "odd", "parameters": {"anyOf": [
    {"type": "object"}, {"type": "array"}]}}}]
status, text = post({"model": "tiny", "messages": conv[:2], "tools": odd, "tool_choice": "required"})
assert status == 400 and '\\"odd\\"' in text, (status, text)
# parallel_tool_calls false: exactly one call.
status, text = post({"model": "tiny", "messages": conv[:2], "tools": tools, "seed": 4,
                     "max_tokens": 300, "tool_choice": "required", "parallel_tool_calls": False})
assert status == 200, (status, text)
assert len(json.loads(text)["choices"][0]["message"]["tool_calls"]) == 1, text
print("dsml: ok")
PY
stop_server
# A deepseek_v32 checkpoint without a chat template: "auto" takes V3.2's format and reasoning.
"$EPSERVE" make-model --preset tiny-v32 --seed 2 --out "$WORK/model32" >/dev/null
/usr/bin/python3 -c '
import json, sys
p = sys.argv[1] + "/tokenizer_config.json"
c = json.load(open(p)); c.pop("chat_template", None); json.dump(c, open(p, "w"))
assert json.load(open(sys.argv[1] + "/config.json"))["model_type"] == "deepseek_v32"
' "$WORK/model32"
start_server "$WORK/server32.log" --model "$WORK/model32" --served-model-name tiny32
grep -q 'tool calls: deepseek_v32, reasoning: deepseek-v3' "$WORK/server32.log" ||
  { cat "$WORK/server32.log"; fail "deepseek_v32 not chosen from model_type"; }
code=$(curl -s --max-time 30 -o "$WORK/out.json" -w '%{http_code}' -H 'Content-Type: application/json' \
  -d '{"model": "tiny32", "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]}' \
  "$BASE/v1/chat/completions")
[[ $code == 200 ]] || { cat "$WORK/out.json"; fail "chat with the built-in V3.2 prompt: $code"; }
stop_server
