"""serve.grammar_hostile's client: the structured-output requests of issue 48's probe, each sent
while a normal request must still be answered, the server's memory watched.

usage: grammar_hostile.py BASE SERVER_PID [--np] [--only SUBSTRING]
Each case prints one line; any failure exits 1. Every wait is bounded."""
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

BASE, PID = sys.argv[1], int(sys.argv[2])
WORLD = "--np" in sys.argv[3:]
# How long a normal request may take while a hostile one is in flight: generous for two slow
# cores (it takes well under a second alone), far below the outages the probe measured
# (30 s and a 503 for the fan-out before the old binary gave up; a 30,000-link chain stalled a
# rank ~16 s under --np; 20,000 forced tools stalled the engine ~14 s in the closing mask).
NORMAL_BOUND = 3.0
ONLY = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else ""
failures = []


def post(path, body, timeout=120):
    data = json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data, headers={"Content-Type": "application/json"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        try:
            body = json.loads(e.read() or b"{}")
        except ValueError:
            body = {}
        return e.code, body, time.monotonic() - t0
    except (OSError, ValueError) as e:  # refused, reset, timed out: the server is gone or stuck
        return None, {"error": {"message": repr(e)}}, time.monotonic() - t0


def rss_mb(pids):
    total = 0
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) // 1024
        except OSError:
            pass
    return total


def family(pid):
    """The server and every process below it (mpirun and the engine ranks under --np)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        except OSError:
            pass
    return out


def alive():
    return os.path.exists(f"/proc/{PID}") and open(f"/proc/{PID}/stat").read().split()[2] != "Z"


def normal():
    return post("/v1/chat/completions",
                {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}, timeout=60)


def chat(schema=None, **extra):
    body = {"messages": [{"role": "user", "content": "give me json"}], "max_tokens": 8}
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "x", "schema": schema}}
    body.update(extra)
    return body


def case(name, body, want, code=None, rss_bound_mb=None, path="/v1/chat/completions"):
    """Sends `body` in the background; meanwhile every normal request must be answered within
    NORMAL_BOUND, the server must stay alive and its family's RSS within rss_bound_mb of where
    it started. The hostile request's status must be `want` (and its error code `code`)."""
    if ONLY not in name:
        return
    base_rss = rss_mb(family(PID))
    result, peak = {}, [base_rss]

    def run():
        result["r"] = post(path, body)

    t = threading.Thread(target=run)
    t.start()
    # Normal requests one after another for as long as the hostile one runs: the slowest of
    # them is what another client would have seen.
    status, took = 200, 0.0
    while True:
        s, _, d = normal()
        if s != 200 or d > took:
            status, took = (s if s != 200 else status), max(took, d)
        peak.append(rss_mb(family(PID)))
        if not t.is_alive() or status != 200:
            break
        time.sleep(0.05)
    t.join(120)
    peak.append(rss_mb(family(PID)))
    ok = True
    if not alive():
        failures.append(f"{name}: the server died")
        print(f"FAIL {name}: the server died")
        return
    if status != 200 or took > NORMAL_BOUND:
        failures.append(f"{name}: a normal request got {status} in {took:.1f} s meanwhile")
        ok = False
    got, reply, hostile_took = result.get("r", (None, {}, 0))
    if got != want:
        failures.append(f"{name}: status {got}, want {want}: {json.dumps(reply)[:300]}")
        ok = False
    if code is not None and (reply.get("error") or {}).get("code") != code:
        failures.append(f"{name}: error code {(reply.get('error') or {}).get('code')}, want {code}")
        ok = False
    grew = max(peak) - base_rss
    if rss_bound_mb is not None and grew > rss_bound_mb:
        failures.append(f"{name}: RSS grew {grew} MB (bound {rss_bound_mb} MB)")
        ok = False
    msg = (reply.get("error") or {}).get("message", "")[:120]
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {got} in {hostile_took:.2f} s, slowest normal request "
          f"{took:.2f} s, RSS +{grew} MB {msg}")
    return reply


# Item 1: unbounded recursion in the grammar compiler (SIGSEGV of the whole server).
case("pattern of 20,000 nested groups",
     chat({"type": "string", "pattern": "(" * 20000 + "a" + ")" * 20000}), 400)
props = {f"p{i}": {"type": "integer"} for i in range(8000)}
case("8,000 optional properties", chat({"type": "object", "properties": props}), 200,
     rss_bound_mb=1000)
props = {f"p{i}": {"type": "integer"} for i in range(40000)}
case("40,000 required properties",
     chat({"type": "object", "properties": props, "required": list(props)}), 200, rss_bound_mb=1000)

# Item 2: a $ref fan-out (three levels of 1000 references; four would have been 10^12 stacks).
defs = {f"l{l}": {"anyOf": [{"$ref": f"#/$defs/l{l + 1}"}] * 1000} for l in range(4)}
defs["l4"] = {"type": "string", "maxLength": 8}
case("$ref fan-out, 4 levels of 1000", chat({"$defs": defs, "$ref": "#/$defs/l0"}), 200,
     rss_bound_mb=500)

# Item 4: compilation stalled the engine (a $ref chain compiled again on a rank's stepping
# thread; forced tools, whose grammar was built there, and whose closing mask was quadratic).
defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(30000)}
defs["d30000"] = {"type": "boolean"}
case("$ref chain of 30,000 links", chat({"$defs": defs, "$ref": "#/$defs/d0"}), 200)
tools = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}
    for i in range(20000)]
case("20,000 tools, tool_choice required",
     {"messages": [{"role": "user", "content": "call one"}], "max_tokens": 8, "tools": tools,
      "tool_choice": "required"}, 200)

# Past the grammar's bounds: a 400 naming grammar_too_complex, never a crash or a stall.
case("an enum of 300,000 values (start state past the bound)",
     chat({"enum": [f"v{i}" for i in range(300000)]}), 400, code="grammar_too_complex")

if ONLY in "ignore_eos + json_object":
    # Item 9: ignore_eos with json_object finishes with "stop" once the JSON is complete (it was a
    # 500). A budget large enough that the model completes the object.
    status, reply, _ = post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "json"}], "max_tokens": 200, "ignore_eos": True,
        "response_format": {"type": "json_object"}, "temperature": 0})
    fin = reply.get("choices", [{}])[0].get("finish_reason") if status == 200 else None
    content = reply.get("choices", [{}])[0].get("message", {}).get("content") if status == 200 else None
    try:
        parsed = json.loads(content) if content is not None else None
    except ValueError:
        parsed = None
    if status != 200 or fin not in ("stop", "length") or (fin == "stop" and not isinstance(parsed, dict)):
        failures.append(f"ignore_eos + json_object: {status} {json.dumps(reply)[:300]}")
    print(f"{'ok  ' if status == 200 else 'FAIL'} ignore_eos + json_object: {status}, finish {fin}")

if ONLY in "grammar caches":
    # Item 3: the cache is bounded in bytes: 24 distinct schemas of ~1.6 MB grammars each (36 MB
    # unbounded) with --grammar-cache-mb 16 keep at most 16 MiB per process.
    for i in range(24):
        status, reply, _ = post("/v1/chat/completions", chat(
            {"type": "string", "maxLength": 4000 + i, "description": f"schema {i}"}, max_tokens=2))
        if status != 200:
            failures.append(f"cache schema {i}: {status} {json.dumps(reply)[:200]}")
            break
    metrics = urllib.request.urlopen(BASE + "/metrics", timeout=10).read().decode()
    held = [float(line.split()[-1]) for line in metrics.splitlines()
            if line.startswith(("epserve:grammar_cache_bytes{", "epserve:scheduler_grammar_cache_bytes{"))]
    if not held or max(held) > 16 * 2**20 or max(held) <= 0:
        failures.append(f"grammar cache bytes {held}: want (0, 16 MiB]")
    print(f"{'ok  ' if held and 0 < max(held) <= 16 * 2**20 else 'FAIL'} grammar caches hold "
          f"{[round(h / 2**20, 1) for h in held]} MiB (bound 16)")

if not alive():
    failures.append("the server is gone at the end")
for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
