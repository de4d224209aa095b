#!/usr/bin/env bash
# serve.bench_serve: `epserve bench serve` against `epserve serve`: its JSON counts every request
# and every token (outputs of exactly --output-len, equal to the server's own generation
# counter), its latency percentiles are ordered; the chat endpoint works too; bad flags and a
# closed port fail fast with a message naming the problem and a nonzero exit.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
PY=/usr/bin/python3
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
start_server "$WORK/server.log" --model "$WORK/model" --served-model-name tiny

bench() {  # bench NAME ARGS...: runs bench serve against the server, output in $WORK/NAME.*
  local name=$1 rc=0
  shift
  timeout 60 "$EPSERVE" bench serve --url "$BASE" --json "$WORK/$name.json" "$@" \
    >"$WORK/$name.txt" 2>"$WORK/$name.err" || rc=$?
  [[ $rc -eq 0 ]] || { cat "$WORK/$name.txt" "$WORK/$name.err"; fail "bench $name: exit $rc"; }
  cat "$WORK/$name.txt"
}

bench completions --num-requests 12 --max-concurrency 4 --input-len 32 --output-len 8 \
  --shared-prefix-share 0.5 --shared-prefix-len 64
grep -q '=== Serving Benchmark Result ===' "$WORK/completions.txt" || fail "no result table"
grep -q 'requests finished (100%)' "$WORK/completions.err" || fail "no progress on stderr"
$PY - "$WORK/completions.json" <<'PYEOF' || fail "completions result"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["model"] == "tiny" and r["endpoint"] == "completions", r
assert r["completed"] == 12 and r["failed"] == 0 and r["errors"] == [], r
assert r["max_concurrency"] == 4 and 1 <= r["peak_in_flight"] <= 4, r
assert r["total_output_tokens"] == 12 * 8, r
# 6 of the 12 prompts open with the 64-token prefix: 32 or 96 tokens each.
assert r["total_input_tokens"] == 12 * 32 + 6 * 64, r
assert 0 <= r["total_cached_tokens"] <= 6 * 64, r
assert r["request_throughput"] > 0 and r["output_throughput"] > 0, r
for key in ("ttft_ms", "e2e_ms", "tpot_ms", "itl_ms"):
    s = r[key]
    # Events that reach the client in one read share a timestamp: an inter-token latency of 0
    # is a real measurement (a fast server, a busy client), so only ITL's median may be 0.
    low = 0 <= s["median"] if key == "itl_ms" else 0 < s["median"]
    assert s["count"] > 0 and low and s["median"] <= s["p90"] <= s["p99"] <= s["max"] and s["max"] > 0, (key, s)
assert r["ttft_ms"]["count"] == r["e2e_ms"]["count"] == 12, r
assert r["ttft_ms"]["p99"] <= r["e2e_ms"]["max"], r
print("bench serve: 12/12 completed, 96 output tokens, cached", r["total_cached_tokens"])
PYEOF
OUT_TOKENS=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["total_output_tokens"])' \
  "$WORK/completions.json")
GEN=$(metric 'epserve:generation_tokens_total')
[[ $GEN == "$OUT_TOKENS" ]] || fail "server generated $GEN tokens, bench counted $OUT_TOKENS"

# Chat: random-word messages at a Poisson rate.
bench chat --endpoint chat --num-requests 4 --request-rate 20 --input-len 16 --output-len 4
$PY -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["endpoint"] == "chat" and r["request_rate"] == 20 and r["max_concurrency"] is None, r
assert r["completed"] == 4 and r["failed"] == 0 and r["total_output_tokens"] == 16, r
assert r["total_input_tokens"] >= 4 * 16, r
' "$WORK/chat.json" || fail "chat result"

# Errors: a bad flag names itself; a closed port is a clear error at once, not a hang.
expect_error() {  # expect_error PATTERN ARGS...
  local pattern=$1 rc=0 start=$SECONDS
  shift
  timeout 30 "$EPSERVE" bench serve "$@" >"$WORK/err.txt" 2>&1 || rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$WORK/err.txt"; fail "exit $rc for: $*"; }
  grep -q -- "$pattern" "$WORK/err.txt" || { cat "$WORK/err.txt"; fail "no '$pattern' for: $*"; }
  ((SECONDS - start <= 10)) || fail "took $((SECONDS - start)) s to fail: $*"
}
expect_error '--request-rate must be > 0' --url "$BASE" --request-rate 0
expect_error '--max-concurrency must be in' --url "$BASE" --max-concurrency -1
expect_error '--url must look like http://HOST:PORT' --url 127.0.0.1:1
expect_error '--model nope is not served' --url "$BASE" --model nope
# A port bound by nobody once the Python process exits: connecting is refused at once.
CLOSED=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
expect_error "cannot reach http://127.0.0.1:$CLOSED" --url "http://127.0.0.1:$CLOSED" \
  --num-requests 2
grep -q 'epserve: error: ' "$WORK/err.txt" || fail "closed port: no 'epserve: error:' line"
cat "$WORK/err.txt"

stop_server
echo "PASS"
