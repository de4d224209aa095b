#!/usr/bin/env bash
# MTP speculative decoding end to end (docs/serving-engine.md, "MTP"), on a tiny model whose MTP
# module drafts well (make-model --mtp-weights from-main):
#  - one process: generate --mtp on gives the tokens and logits of --mtp off, bit for bit, and
#    prints its acceptance;
#  - under mpirun (EP over 2 ranks, then 4 ranks with TP 2): --mtp on gives the single-process
#    tokens, logits within 1e-4 (the EP tests' bound);
#  - --mtp on with a model that has no MTP module fails with one line naming the flag.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../ep/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --mtp-weights from-main --seed 3 --out "$WORK/model" >/dev/null
PROMPTS=(--prompt-ids 10,11,12 --prompt-ids "$(seq -s, 100 140)" --prompt-ids 7 --prompt-ids "$(seq -s, 300 317)")
run() {  # run NAME [args...]
  local name=$1
  shift
  timeout 300 "$@" --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 24 --ignore-eos \
    --logits-out "$WORK/$name.npy" --tokens-out "$WORK/$name.json" >"$WORK/$name.out"
}
run off "$EPSERVE" generate --mtp off
run on "$EPSERVE" generate --mtp on
cmp "$WORK/off.json" "$WORK/on.json"
cmp "$WORK/off.npy" "$WORK/on.npy"
grep -E "^mtp: [0-9]+ drafts, [0-9]+ accepted" "$WORK/on.out"
if grep -q "^mtp:" "$WORK/off.out"; then echo "FAIL: --mtp off printed MTP stats"; exit 1; fi
# Expert parallelism dispatches FP8 rows: the single-process reference rounds alike.
run single_fp8 "$EPSERVE" generate --mtp off --expert-input fp8
run ep2 "${MPIRUN[@]}" -np 2 "$EPSERVE" generate --mtp on --timeout 120
run ep4 "${MPIRUN[@]}" -np 4 "$EPSERVE" generate --mtp on --tp 2 --timeout 120
for r in ep2 ep4; do
  grep -E "^mtp: [0-9]+ drafts, [0-9]+ accepted" "$WORK/$r.out"
  /usr/bin/python3 "$HERE/../reference/compare.py" --engine-logits "$WORK/$r.npy" \
    --ref-logits "$WORK/single_fp8.npy" --engine-tokens "$WORK/$r.json" \
    --ref-tokens "$WORK/single_fp8.json" --tol 1e-4
done
"$EPSERVE" make-model --preset tiny-v2 --out "$WORK/nomtp" >/dev/null
set +e
timeout 60 "$EPSERVE" generate --model "$WORK/nomtp" --prompt-ids 1,2 --mtp on >"$WORK/bad.out" 2>&1
rc=$?
set -e
cat "$WORK/bad.out"
[[ $rc == 1 ]]
grep -q "num_nextn_predict_layers is 0" "$WORK/bad.out"
# make-model --mtp-layers gives a preset without one an MTP module (V2 attention: no q_lora).
"$EPSERVE" make-model --preset tiny-v2 --mtp-layers 1 --mtp-weights from-main --out "$WORK/v2mtp" >/dev/null
for m in off on; do
  timeout 120 "$EPSERVE" generate --model "$WORK/v2mtp" "${PROMPTS[@]}" --max-tokens 16 --ignore-eos \
    --mtp $m --logits-out "$WORK/v2_$m.npy" --tokens-out "$WORK/v2_$m.json" >"$WORK/v2_$m.out"
done
cmp "$WORK/v2_off.json" "$WORK/v2_on.json"
cmp "$WORK/v2_off.npy" "$WORK/v2_on.npy"
grep -E "^mtp: [0-9]+ drafts, [1-9][0-9]* accepted" "$WORK/v2_on.out"

# bench mtp: both modes on the same requests give the same tokens, the draft agrees often on
# this model, and the planner's prediction sits beside each row (a catalog of made-up CPU ranks).
cat >"$WORK/cpu.json" <<'JSON'
{"gpus": [{"name": "cpu", "description": "test CPU ranks", "fp8_tflops": 0.3, "bf16_tflops": 0.3,
  "memory_gb": 16, "memory_bandwidth_tbs": 0.04, "nvlink_gbs": 10, "nvlink_latency_us": 1,
  "infiniband_gbs": 0.125, "infiniband_latency_us": 1000, "gpus_per_machine": 1}]}
JSON
timeout 300 "$EPSERVE" bench mtp --model "$WORK/model" --batches 1,3 --repeats 2 --decode-tokens 12 \
  --threads 2 --planner-hardware "$WORK/cpu.json" --json >"$WORK/bench.json"
/usr/bin/python3 - "$WORK/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert [x["batch"] for x in r["rows"]] == [1, 3], r
for x in r["rows"]:
    assert x["identical"], f"batch {x['batch']}: MTP changed the greedy tokens"
    assert x["draft_tokens"] > 0 and 0 < x["accepted_draft_tokens"] <= x["draft_tokens"], x
    assert abs(x["tokens_per_step"] - (1 + x["accepted_draft_tokens"] / x["draft_tokens"])) < 1e-9, x
    assert x["off_tokens_per_s"] > 0 and x["on_tokens_per_s"] > 0, x
    assert abs(x["speedup"] - x["on_tokens_per_s"] / x["off_tokens_per_s"]) < 1e-9, x
    p = x["planned"]
    assert abs(p["tokens_per_step"] - x["tokens_per_step"]) < 1e-9, (p, x)
    assert p["on_step_ms"] > p["off_step_ms"] > 0, p
    want = p["tokens_per_step"] * p["off_step_ms"] / p["on_step_ms"]
    assert abs(p["speedup"] - want) < 1e-6 * want, (p, want)
print("bench mtp:", [(x["batch"], round(x["acceptance"], 2), round(x["speedup"], 2)) for x in r["rows"]])
PY
set +e
timeout 60 "$EPSERVE" bench mtp --model "$WORK/nomtp" >"$WORK/bad_bench.out" 2>&1
rc=$?
set -e
cat "$WORK/bad_bench.out"
[[ $rc == 1 ]]
grep -q "nomtp/config.json: --mtp on: the model has no MTP module" "$WORK/bad_bench.out"
echo "mtp: identical outputs in one process and under mpirun"
