#!/usr/bin/env bash
# Prefix reuse and the pool's limits, in one process:
#  - a request whose prompt extends a finished one's reuses its full blocks (2 x 64 of 150
#    tokens): the engine computes only the rest, and the tokens equal a run without reuse;
#  - a request larger than the whole pool fails at submission with a clear error while the
#    others finish; the command exits 1.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny-v2 --seed 4 --out "$WORK/model" >/dev/null
/usr/bin/python3 "$HERE/make_arrivals.py" prefix "$WORK/prefix.jsonl"
timeout 120 "$EPSERVE" generate --model "$WORK/model" --arrivals "$WORK/prefix.jsonl" --tokens-out "$WORK/reuse.json" >"$WORK/reuse.out"
timeout 120 "$EPSERVE" generate --model "$WORK/model" --arrivals "$WORK/prefix.jsonl" --no-prefix-cache \
  --tokens-out "$WORK/fresh.json" >"$WORK/fresh.out"
/usr/bin/python3 - "$WORK" <<'PY'
import json, re, sys
w = sys.argv[1]
reuse, fresh = json.load(open(f"{w}/reuse.json")), json.load(open(f"{w}/fresh.json"))
assert reuse["tokens"] == fresh["tokens"], ("reuse changed tokens", reuse["tokens"], fresh["tokens"])
assert reuse["cached_prompt_tokens"] == [0, 128], reuse["cached_prompt_tokens"]
assert fresh["cached_prompt_tokens"] == [0, 0], fresh["cached_prompt_tokens"]
# Computed = prompt tokens not from the cache + fed-back generated tokens.
out = open(f"{w}/reuse.out").read()
m = re.search(r"engine: \d+ steps, (\d+) of (\d+) prompt tokens from the prefix cache", out)
assert m and m.group(1) == "128" and m.group(2) == "340", out
print("prefix reuse: request 1 took 128 of 190 prompt tokens from the cache; tokens identical")
PY
grep -E "^prefill: 212 tokens" "$WORK/reuse.out"  # 150 + 190 - 128 computed
grep -E "^prefill: 340 tokens" "$WORK/fresh.out"
# A request larger than the pool (4 blocks = 256 positions; it needs 301).
printf '%s\n' '{"step": 0, "prompt_ids": [5, 6, 7], "max_tokens": 4}' \
  "{\"step\": 0, \"prompt_ids\": [$(seq -s, 10 290)], \"max_tokens\": 20}" \
  '{"step": 1, "prompt_ids": [8, 9], "max_tokens": 3}' >"$WORK/big.jsonl"
set +e
timeout 60 "$EPSERVE" generate --model "$WORK/model" --arrivals "$WORK/big.jsonl" --kv-memory 600K >"$WORK/big.out" 2>"$WORK/big.err"
rc=$?
set -e
cat "$WORK/big.out" "$WORK/big.err"
[[ $rc == 1 ]]
grep -q "sequence 1: \[error: request needs 300 cache positions (5 blocks of 64); the whole KV pool holds 4 blocks" "$WORK/big.out"
grep -qE "sequence 0:( [0-9]+){1,4} \[(length|stop)" "$WORK/big.out"
grep -qE "sequence 2:( [0-9]+){1,3} \[(length|stop)" "$WORK/big.out"
