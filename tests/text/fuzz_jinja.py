#!/usr/bin/python3
"""Differential test: random templates built from whitespace-control pieces (trim_blocks,
lstrip_blocks, `-`/`+` modifiers, comments, loops) rendered by jinja2 and by chat_template_check
--jsonl must agree: same text, or both an error. Fixed seed, so failures reproduce.

Usage: fuzz_jinja.py CHAT_TEMPLATE_CHECK [SEED] [COUNT]
"""

import json
import os
import random
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from render_jinja2 import make_env  # noqa: E402

PIECES = ["a", " ", "\n", "  ", "\t", "x\n  ", "{% if c %}", "{%- if c %}", "{% if c -%}", "{%+ if c %}",
          "{% if c +%}", "{% else %}", "{%- else -%}", "{% endif %}", "{%- endif -%}", "{% endif +%}", "{{ v }}",
          "{{- v }}", "{{ v -}}", "{# c #}", "{#- c -#}", "{# c +#}", "\n\n", " \n ", "{% for i in l %}",
          "{% endfor %}", "{%- for i in l -%}", "{%- endfor %}", "{{ i }}", "{{ loop.index }}", "{% set t = 1 %}",
          "\r\n", "   {% if c %}\n", "{% endif %}\n   "]
CONTEXTS = [{"c": True, "v": "V", "l": [1, 2]}, {"c": False, "v": None, "l": []}]


def balanced(rng):
    """A random piece sequence with its blocks closed, so most cases render."""
    out, stack = [], []
    for _ in range(rng.randint(1, 12)):
        p = rng.choice(PIECES)
        if "endif" in p or "endfor" in p or "else" in p:
            want = "if" if ("endif" in p or "else" in p) else "for"
            if not stack or stack[-1] != want:
                continue
            if "else" not in p:
                stack.pop()
        elif "{% if" in p or "{%- if" in p or "{%+ if" in p:
            stack.append("if")
        elif "for i" in p:
            stack.append("for")
        out.append(p)
    for b in reversed(stack):
        out.append("{% end" + b + " %}")
    return "".join(out)


def main():
    binary = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    rng = random.Random(seed)
    env = make_env(0)
    cases = [(balanced(rng), ctx) for _ in range(count) for ctx in CONTEXTS]
    lines = "".join(json.dumps({"tpl": t, "ctx": c}) + "\n" for t, c in cases)
    ours = subprocess.run([binary, "--jsonl"], input=lines, capture_output=True, text=True, check=True)
    results = [json.loads(r) for r in ours.stdout.splitlines()]
    assert len(results) == len(cases), "chat_template_check --jsonl returned %d lines" % len(results)
    differ = rendered = 0
    for (tpl, ctx), got in zip(cases, results):
        try:
            want, want_ok = env.from_string(tpl).render(**ctx), True
        except Exception as e:  # noqa: BLE001 - any jinja2 error must be an error in ours
            want, want_ok = "%s: %s" % (type(e).__name__, e), False
        rendered += want_ok
        if want_ok != got["ok"] or (want_ok and want != got["out"]):
            differ += 1
            if differ <= 10:
                print("DIFFER %r %s\n  jinja2: %r\n  ours:   %r" % (tpl, json.dumps(ctx), want, got))
    print("%d cases (%d rendered by jinja2), %d differ" % (len(cases), rendered, differ))
    sys.exit(1 if differ or rendered < len(cases) // 2 else 0)


if __name__ == "__main__":
    main()
