#!/usr/bin/python3
"""Renders every (template, conversation) pair with jinja2 exactly as transformers does.

transformers.utils.chat_template_utils._compile_jinja_template builds
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker,
jinja2.ext.loopcontrols]), replaces the tojson filter with json.dumps(ensure_ascii=False, ...) and
adds the raise_exception and strftime_now globals; render_jinja_template then renders with
messages, tools (None when absent), documents (None), add_generation_prompt and the special
tokens. strftime_now formats a fixed instant here (UTC) so the C++ side can reproduce it.

Usage: render_jinja2.py CONVERSATIONS.json TEMPLATE_DIR OUT.json
OUT.json: {"results": [{"template", "conversation", "ok", "output" | "error"}, ...]}
"""

import json
import os
import sys
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(Extension):
    """transformers' {% generation %} tag, reduced to rendering its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env(fixed_epoch):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(fixed_epoch, tz=timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def context_for(spec, conv, template_tokens):
    """The render context; chat_template_check builds the same one (keep them in step)."""
    ctx = {
        "messages": conv["messages"],
        "tools": conv.get("tools"),
        "documents": None,
        "add_generation_prompt": conv.get("add_generation_prompt", False),
        "strftime_now_epoch": spec["fixed_time_epoch"],
    }
    ctx.update(template_tokens)
    ctx.update(conv.get("extra", {}))
    return ctx


def main():
    conv_path, template_dir, out_path = sys.argv[1:4]
    with open(conv_path, encoding="utf-8") as f:
        spec = json.load(f)
    env = make_env(spec["fixed_time_epoch"])
    results = []
    for name, tokens in spec["templates"].items():
        with open(os.path.join(template_dir, name), encoding="utf-8", newline="") as f:
            template = env.from_string(f.read())
        for idx, conv in enumerate(spec["conversations"]):
            entry = {"template": name, "conversation": idx}
            try:
                entry["output"] = template.render(**context_for(spec, conv, tokens))
                entry["ok"] = True
            except Exception as e:  # a template error must be an error in ours too
                entry["ok"] = False
                entry["error"] = "%s: %s" % (type(e).__name__, e)
            results.append(entry)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "results": results}, f, ensure_ascii=False, indent=1)
    print("rendered %d pairs with jinja2 %s" % (len(results), jinja2.__version__))


if __name__ == "__main__":
    main()
