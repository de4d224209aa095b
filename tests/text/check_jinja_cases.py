#!/usr/bin/python3
"""Checks the hand-written expectations of src/text/jinja_test.cc (kCases) against jinja2.

Each case line is `{"name", TEMPLATE, CONTEXT_JSON, EXPECTED},` with C string literals (raw
R"J(...)J" or escaped "..."). Every template is rendered in transformers' environment
(render_jinja2.make_env) and must give EXPECTED exactly. Usage: check_jinja_cases.py JINJA_TEST.cc
"""

import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from render_jinja2 import make_env  # noqa: E402

LITERAL = re.compile(r'R"J\((.*?)\)J"|"((?:[^"\\]|\\.)*)"', re.S)


def c_string(match):
    if match.group(1) is not None:
        return match.group(1)
    return match.group(2).encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


def main():
    text = open(sys.argv[1], encoding="utf-8").read()
    body = text[text.index("const Case kCases[] = {"):text.index("// clang-format on")]
    failures = 0
    count = 0
    for line in body.splitlines():
        if not line.lstrip().startswith('{"'):
            continue
        parts = [c_string(m) for m in LITERAL.finditer(line)]
        if len(parts) != 4:
            print("cannot parse case line: " + line)
            failures += 1
            continue
        name, tpl, ctx, want = parts
        ctx = json.loads(ctx)
        env = make_env(ctx.get("strftime_now_epoch", 0))
        count += 1
        try:
            got = env.from_string(tpl).render(**ctx)
        except Exception as e:
            got = "<error %s: %s>" % (type(e).__name__, e)
        if got != want:
            failures += 1
            print("case %r: jinja2 gives %r, the test expects %r" % (name, got, want))
    print("%d cases, %d disagree with jinja2" % (count, failures))
    sys.exit(1 if failures or count == 0 else 0)


if __name__ == "__main__":
    main()
