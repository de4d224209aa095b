#!/usr/bin/env python3
"""Writes tests/serve/dsv4_prompt_cases.json: OpenAI chat requests and the prompt DeepSeek's
own encoder renders for each, the expectations of src/serve/dsv4_prompt_test.cc.

  /usr/bin/python3 tests/serve/make_dsv4_prompt_cases.py PATH/TO/encoding_dsv4.py [OUT.json]

encoding_dsv4.py is DeepSeek-V4's prompt encoder (the encoding/ folder of its Hugging Face
repositories); it is not part of this repository. A request becomes the encoder's input as
epserve's server does it (docs/serving-api.md, "DeepSeek-V4"): the request's tools (and a
json_schema response_format's schema) go on the first message when it is a system message,
else on a system message of empty content put first; thinking mode is chat_template_kwargs
"thinking" (or "enable_thinking") when it is a boolean, else on exactly when reasoning_effort
is given and not "none";
reasoning_effort "max" (or "xhigh") is the encoder's "max", anything else adds nothing; a
message content given as a list of parts is the concatenation of its text parts.
"""
import copy
import importlib.util
import json
import os
import sys

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "opts": {"type": "object"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "Local time",
                                         "parameters": {"type": "object", "properties": {}}}}

TOOL_CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in 杭州, and the time?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two tools.",
     "tool_calls": [
         {"id": "call_a", "type": "function", "function": {
             "name": "get_weather",
             "arguments": json.dumps({"city": "杭州", "days": 2, "ratio": 0.5,
                                      "note": "say \"hi\"\nbye",
                                      "opts": {"a": [1, True, None], "é": "ü"}},
                                     ensure_ascii=False)}},
         {"id": "call_b", "type": "function", "function": {"name": "get_time",
                                                           "arguments": "{}"}}]},
    # Results out of call order: the encoder puts them back in the calls' order.
    {"role": "tool", "tool_call_id": "call_b", "content": "12:00"},
    {"role": "tool", "tool_call_id": "call_a", "content": "Sunny, 20C"},
    {"role": "assistant", "content": "Sunny and noon.", "reasoning_content": "Both came back."},
    {"role": "user", "content": "Thanks. Tomorrow?"},
]

CASES = [
    {"name": "tools_thinking", "messages": TOOL_CONVERSATION, "tools": [WEATHER, TIME],
     "chat_template_kwargs": {"thinking": True}},
    {"name": "tools_chat", "messages": TOOL_CONVERSATION, "tools": [WEATHER, TIME]},
    {"name": "tool_result_then_user_text", "tools": [WEATHER],
     "chat_template_kwargs": {"thinking": True},
     "messages": [
         {"role": "user", "content": "Weather?"},
         {"role": "assistant", "content": None, "tool_calls": [
             {"id": "c1", "type": "function",
              "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
         {"role": "tool", "tool_call_id": "c1",
          "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
         {"role": "user", "content": "Also, be brief."}]},
    {"name": "multi_turn_thinking_drops_old_reasoning",
     "chat_template_kwargs": {"thinking": True},
     "messages": [
         {"role": "system", "content": "Be brief."},
         {"role": "user", "content": "Hello"},
         {"role": "assistant", "content": "Hi!", "reasoning_content": "A greeting."},
         {"role": "user", "content": "2+2?"},
         {"role": "assistant", "content": "4", "reasoning_content": "Arithmetic."},
         {"role": "user", "content": "And 3+3?"}]},
    {"name": "multi_turn_chat",
     "messages": [
         {"role": "user", "content": "Hello"},
         {"role": "assistant", "content": "Hi!", "reasoning_content": "ignored in chat"},
         {"role": "user", "content": "Bye"}]},
    {"name": "consecutive_user_messages_merge",
     "messages": [
         {"role": "user", "content": "First."},
         {"role": "user", "content": "Second."}]},
    {"name": "tools_without_system", "tools": [TIME],
     "messages": [{"role": "user", "content": "Time?"}]},
    {"name": "reasoning_effort_max", "reasoning_effort": "max",
     "messages": [{"role": "system", "content": "S."}, {"role": "user", "content": "Prove it."}]},
    {"name": "reasoning_effort_high", "reasoning_effort": "high",
     "messages": [{"role": "user", "content": "Prove it."}]},
    {"name": "reasoning_effort_none", "reasoning_effort": "none",
     "messages": [{"role": "user", "content": "Quick."}]},
    {"name": "enable_thinking_kwarg", "chat_template_kwargs": {"enable_thinking": True},
     "reasoning_effort": "xhigh",
     "messages": [{"role": "user", "content": "Deep."}]},
    {"name": "reasoning_effort_max_thinking_off", "reasoning_effort": "max",
     "chat_template_kwargs": {"thinking": False},
     "messages": [{"role": "user", "content": "Quick."}]},
    {"name": "latest_reminder_and_developer", "chat_template_kwargs": {"thinking": True},
     "messages": [
         {"role": "system", "content": "System."},
         {"role": "latest_reminder", "content": "2026-12-07, Paris"},
         {"role": "developer", "content": "Search for this."},
         {"role": "assistant", "content": "Done.", "reasoning_content": "Searched."},
         {"role": "user", "content": "More?"}]},
    {"name": "response_format_schema",
     "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {
         "type": "object", "properties": {"answer": {"type": "string"}},
         "required": ["answer"]}}},
     "messages": [{"role": "system", "content": "JSON only."},
                  {"role": "user", "content": "Capital of France?"}]},
    {"name": "content_parts",
     "messages": [{"role": "user", "content": [{"type": "text", "text": "Look "},
                                               {"type": "text", "text": "here."}]}]},
    {"name": "ends_with_assistant",
     "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]},
]


def thinking_of(case):
    kw = case.get("chat_template_kwargs", {})
    for key in ("thinking", "enable_thinking"):
        if isinstance(kw.get(key), bool):
            return kw[key]
    return case.get("reasoning_effort") not in (None, "none")


def encoder_input(case):
    msgs = copy.deepcopy(case["messages"])
    for m in msgs:
        if isinstance(m.get("content"), list) and m["role"] != "tool":
            m["content"] = "".join(p.get("text", "") for p in m["content"]
                                   if p.get("type") == "text")
    extra = {}
    if case.get("tools"):
        extra["tools"] = case["tools"]
    rf = case.get("response_format")
    if rf and rf.get("type") == "json_schema":
        extra["response_format"] = rf["json_schema"]["schema"]
    if extra:
        if not msgs or msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": ""})
        msgs[0].update(extra)
    effort = "max" if case.get("reasoning_effort") in ("max", "xhigh") else None
    return msgs, ("thinking" if thinking_of(case) else "chat"), effort


def main():
    spec = importlib.util.spec_from_file_location("encoding_dsv4", sys.argv[1])
    enc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enc)
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__),
                                                              "dsv4_prompt_cases.json")
    cases = []
    for case in CASES:
        msgs, mode, effort = encoder_input(case)
        c = dict(case)
        c["expected"] = enc.encode_messages(msgs, thinking_mode=mode, reasoning_effort=effort)
        cases.append(c)
    with open(out, "w") as f:
        json.dump({"generated_by": "tests/serve/make_dsv4_prompt_cases.py with DeepSeek-V4's "
                                   "encoding/encoding_dsv4.py", "cases": cases},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
