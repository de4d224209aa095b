#!/usr/bin/env bash
# The bad-input suite: every row of cases.tsv is one command line that must fail cleanly, with
# the expected exit code and an error containing the expected text, and never crash (a signal,
# "terminate called", a JSON library's own message). Lists every row that differs.
#
# cases.tsv: NAME <tab> ARGS <tab> EXIT <tab> SUBSTRING, '#' lines are comments. ARGS follow
# `epserve` and may use $MODEL (a tiny model made once), $WORK (this run's folder) and shell
# redirections; they are evaluated by bash. The expected text may use $WORK too. An ARGS
# starting with "@mpi " runs under
# `mpirun -np 2` (none do today: every row fails before any rank would start).
#
# Usage: run_cases.sh EPSERVE WORK
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
MODEL=$WORK/model
"$EPSERVE" make-model --preset tiny --out "$MODEL" >/dev/null || { echo "make-model failed"; exit 1; }

# Models whose config.json is wrong in one field (a copy of the good one).
bad_config() {  # bad_config NAME SED_EXPRESSION
  mkdir -p "$WORK/$1"
  ln -sf "$MODEL/model.safetensors" "$WORK/$1/model.safetensors"
  sed -E "$2" "$MODEL/config.json" >"$WORK/$1/config.json"
  grep -q . "$WORK/$1/config.json" && ! cmp -s "$MODEL/config.json" "$WORK/$1/config.json" ||
    { echo "setup: $1 edit did not apply"; exit 1; }
}
bad_config rope0 's/"rope_theta": [^,]*/"rope_theta": 0/'
bad_config rope_neg 's/"rope_theta": [^,]*/"rope_theta": -10000/'
bad_config eps_neg 's/"rms_norm_eps": [^,]*/"rms_norm_eps": -1/'
bad_config eps0 's/"rms_norm_eps": [^,]*/"rms_norm_eps": 0/'
bad_config yarn0 's/"factor": [^,]*/"factor": 0/'
bad_config mscale_neg 's/"mscale": [^,]*/"mscale": -1/'
bad_config layers_2e40 's/"num_hidden_layers": [^,]*/"num_hidden_layers": 1099511627776/'
bad_config scaling_neg 's/"routed_scaling_factor": [^,]*/"routed_scaling_factor": -2.5/'
bad_config no_hidden '/"hidden_size"/d'
mkdir -p "$WORK/cfg_trunc" && ln -sf "$MODEL/model.safetensors" "$WORK/cfg_trunc/model.safetensors" &&
  head -c 300 "$MODEL/config.json" >"$WORK/cfg_trunc/config.json"
mkdir -p "$WORK/tok_trunc" && head -c 1000 "$MODEL/tokenizer.json" >"$WORK/tok_trunc/tokenizer.json"

# A model whose layer 2 holds a NaN weight (generation must stop, naming the layer).
mkdir -p "$WORK/nan_weight" && cp "$MODEL/config.json" "$MODEL/model.safetensors" "$WORK/nan_weight/" &&
  /usr/bin/python3 "$HERE/../cli/corrupt.py" "$WORK/nan_weight/model.safetensors" nan ||
  { echo "setup: nan_weight failed"; exit 1; }

# Traces: a small valid JSONL one (layers 1-3 of the tiny model) and ones with a wrong type.
for t in 0 1 2 3 4 5 6 7; do
  for l in 1 2 3; do
    echo "{\"layer\": $l, \"token\": $t, \"sequence\": $((t / 4)), \"experts\": [$((t % 32)), $(((t + 5) % 32)), $(((t + 11) % 32)), $(((t + 17) % 32))]}"
  done
done >"$WORK/trace.jsonl"
echo '{"layer": "one", "token": 0, "experts": [1, 2, 3, 4]}' >"$WORK/wrong_type.jsonl"
echo '{"layer": 1, "token": 0, "experts": "1,2,3,4"}' >"$WORK/experts_string.jsonl"
echo '{"layer": 1, "token": 0, "sequence": "a", "experts": [1, 2, 3, 4]}' >"$WORK/sequence_string.jsonl"
echo '{"layer": 1, "token": 0, "experts": [1, 2.5, 3, 4]}' >"$WORK/experts_float.jsonl"
# Placements that do not fit the trace they are evaluated on (place evaluate refuses them).
T_SHAPE=(--top-k 4 --hidden-size 256 --moe-intermediate-size 64 --num-hidden-layers 4)
"$EPSERVE" trace import "$WORK/trace.jsonl" --out "$WORK/t32.trace" --num-experts 32 "${T_SHAPE[@]}" >/dev/null &&
  "$EPSERVE" trace import "$WORK/trace.jsonl" --out "$WORK/t64.trace" --num-experts 64 "${T_SHAPE[@]}" >/dev/null &&
  "$EPSERVE" place --trace "$WORK/t32.trace" --strategy contiguous --nodes 2 --ranks-per-node 2 \
    --out "$WORK/p32.json" >/dev/null &&
  /usr/bin/python3 - "$WORK" <<'PY' || { echo "setup: placements failed"; exit 1; }
import json, sys
work = sys.argv[1]
p = json.load(open(work + '/p32.json'))
q = dict(p, layers=[l for l in p['layers'] if l['layer'] != 3])
json.dump(q, open(work + '/p_layers12.json', 'w'))
q = dict(p, model=dict(p['model'], top_k=6))
json.dump(q, open(work + '/p_top6.json', 'w'))
q = dict(p)
del q['topology']
json.dump(q, open(work + '/p_no_topology.json', 'w'))
q = dict(p, model={k: v for k, v in p['model'].items() if k != 'top_k'})
json.dump(q, open(work + '/p_no_top_k.json', 'w'))
PY
head -c 400 "$WORK/p32.json" >"$WORK/p_trunc.json"
# Truncated or malformed JSON elsewhere: a trace row, a trace header, arrivals, planner inputs.
echo '{"layer": 1, "token": 0, "experts": [1, 2' >"$WORK/row_trunc.jsonl"
(head -n 1 "$WORK/t32.trace" && head -n 2 "$WORK/t32.trace" | tail -n 1 | head -c 40 && echo) >"$WORK/header_trunc.trace"
echo '{"step": 0, "prompt_ids": [1, 2}' >"$WORK/arrivals_bad_json.jsonl"
printf '{\n  "gpus": [\n    {"name": "X",' >"$WORK/hw_trunc.json"
echo '{"gpus": [{"name": "X"}]}' >"$WORK/hw_no_tflops.json"
printf '{"factors": ' >"$WORK/eff_trunc.json"
# Sizes from a header, bounded before anything is allocated: a trace claiming 2e9 decoder layers.
/usr/bin/python3 - "$WORK" <<'PY' || { echo "setup: huge_layers.trace failed"; exit 1; }
import sys
work = sys.argv[1]
raw = open(work + '/t32.trace', 'rb').read()
key = b'"num_hidden_layers":4'
assert key in raw
open(work + '/huge_layers.trace', 'wb').write(raw.replace(key, b'"num_hidden_layers":2000000000', 1))
PY

# Arrivals for generate with a sampling value out of range.
echo '{"step": 0, "prompt_ids": [1, 2], "top_p": 2}' >"$WORK/arrivals_top_p.jsonl"
echo '{"step": 0, "prompt_ids": [1, 2], "temperature": -1}' >"$WORK/arrivals_temperature.jsonl"
echo '{"step": 0, "prompt_ids": [1, 2], "max_tokens": 0}' >"$WORK/arrivals_max_tokens.jsonl"

# make-model --force over a sharded model, writing one shard: the old index must not survive.
"$EPSERVE" make-model --preset tiny --shards 3 --out "$WORK/forced" >/dev/null &&
  "$EPSERVE" make-model --preset tiny --out "$WORK/forced" --force >/dev/null ||
  { echo "setup: make-model --force failed"; exit 1; }

fail=0 rows=0
while IFS=$'\t' read -r name args want_rc want; do
  [[ -z "$name" || "$name" == \#* ]] && continue
  rows=$((rows + 1))
  want=${want//\$WORK/$WORK}  # the expected text may name this run's folder
  runner=(timeout 60 "$EPSERVE")
  if [[ "$args" == "@mpi "* ]]; then
    args=${args#@mpi }
    runner=(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$EPSERVE")
  fi
  out=$(cd "$WORK" && eval '"${runner[@]}"' "$args" 2>&1 </dev/null)
  rc=$?
  why=""
  if ((rc == 124 || rc >= 128)); then
    why="crashed or timed out (exit $rc)"
  elif [[ "$out" == *"terminate called"* || "$out" == *"Segmentation"* ||
          "$out" == *"json.exception"* || "$out" == *"internal error"* ]]; then
    why="crash text in the output"
  elif [[ "$rc" != "$want_rc" ]]; then
    why="exit $rc, want $want_rc"
  elif [[ "$out" != *"$want"* ]]; then
    why="output lacks [$want]"
  fi
  if [[ -n "$why" ]]; then
    echo "FAIL $name: $why"
    echo "     epserve $args"
    printf '%s\n' "$out" | tail -n 5 | sed 's/^/     | /'
    fail=$((fail + 1))
  else
    echo "ok   $name: $(printf '%s\n' "$out" | grep -m1 'epserve: ' || printf '%s' "$out" | tail -n 1)"
  fi
done <"$HERE/cases.tsv"

echo "$rows rows, $fail failed"
((rows >= 40)) || { echo "expected at least 40 rows"; exit 1; }
((fail == 0))
