#!/usr/bin/env bash
# The copy-budget flags of `epserve place` and `place evaluate` (--redundant-slots,
# --copy-budget-gb, --redundant, --frontier): bad values fail with the flag and value named and
# the documented exit code (105 at parse time, 1 after the trace is read); good ones place
# under the budget they say. Usage: budget_cli_test.sh EPSERVE WORK
set -uo pipefail
EPSERVE=$1 WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
# A JSONL trace of 32 experts, top-4, 3 layers, 64 tokens in 16 sequences (the V2-Lite shape
# otherwise: 17.3 MB per expert).
for t in $(seq 0 63); do
  for l in 1 2 3; do
    echo "{\"layer\": $l, \"token\": $t, \"sequence\": $((t / 4)), \"experts\": [$((t % 8)), $(((t + 3) % 8 + 8)), $(((t + 5) % 16 + 16)), $(((t * 7) % 32 == (t % 8) ? 31 : (t * 7) % 32))]}"
  done
done >trace.jsonl
"$EPSERVE" trace import trace.jsonl --out t.trace --num-experts 32 --top-k 4 >/dev/null ||
  { echo "setup: trace import failed"; exit 1; }

failures=0
expect() {  # expect NAME EXIT SUBSTRING -- ARGS...
  local name=$1 code=$2 want=$3
  shift 4
  local out rc
  out=$("$EPSERVE" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne $code || $out != *"$want"* ]]; then
    echo "FAIL $name: exit $rc (want $code), output:"
    echo "$out" | head -5
    echo "  wanted: $want"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

P=(place --trace t.trace --nodes 2 --ranks-per-node 2 --out p.json)
E=(place evaluate --trace t.trace --train-fraction 0.5 --nodes 2 --ranks-per-node 2)
expect slots_negative 105 "--redundant-slots: must be an integer >= 0, got -1" -- "${P[@]}" --redundant-slots -1
expect gb_nan 105 "--copy-budget-gb: must be a finite number > 0, got nan" -- "${P[@]}" --copy-budget-gb nan
expect gb_zero 105 "--copy-budget-gb: must be a finite number > 0, got 0" -- "${P[@]}" --copy-budget-gb 0
expect both 1 "--redundant-slots and --copy-budget-gb both set the copy budget; give one" -- \
  "${P[@]}" --redundant-slots 4 --copy-budget-gb 1
expect legacy_and_new 1 "--redundant 4: give the copy budget once" -- "${P[@]}" --redundant 4 --redundant-slots 2
expect too_many 1 "--redundant-slots 100000: 100000 extra slots per layer, more than 512" -- \
  "${P[@]}" --redundant-slots 100000
expect gb_too_many 1 "--copy-budget-gb 1e+06:" -- "${P[@]}" --copy-budget-gb 1e6
expect frontier_bad 1 "--frontier 8,x: entry \"x\" is not a slot count" -- "${E[@]}" --frontier 8,x
expect frontier_and_budget 1 "--frontier 8: the frontier sets the copy budget itself" -- \
  "${E[@]}" --frontier 8 --redundant-slots 4
expect compare_slots_negative 105 "--redundant-slots: must be an integer >= 0, got -2" -- \
  "${E[@]}" --compare grace --redundant-slots -2

# Good budgets: the placement holds at most that many extra slots per layer (3 layers).
expect place_slots 0 "budget: 2 extra slots per layer (6.2% of 32 experts; 6 over 3 layers" -- \
  "${P[@]}" --redundant-slots 2
copies=$(/usr/bin/python3 -c "import json; p=json.load(open('p.json')); print(max(sum(len(r) for r in l['ranks']) - 32 for l in p['layers']))")
[[ $copies -le 2 ]] || { echo "FAIL place_slots: $copies extra slots in a layer"; failures=$((failures + 1)); }
# 0.21 GB buys 4 slots per layer: 4 x 3 x 17.3 MB = 0.208 GB.
expect place_gb 0 "budget: 4 extra slots per layer" -- "${P[@]}" --copy-budget-gb 0.21
expect place_eplb 0 "budget: 3 extra slots per layer" -- "${P[@]}" --strategy eplb --redundant-slots 3
copies=$(/usr/bin/python3 -c "import json; p=json.load(open('p.json')); print(min(sum(len(r) for r in l['ranks']) - 32 for l in p['layers']))")
[[ $copies -eq 3 ]] || { echo "FAIL place_eplb: eplb got $copies, not the 3 of its budget"; failures=$((failures + 1)); }
expect place_placement_budget 1 "--placement is already placed" -- \
  place evaluate --trace t.trace --placement p.json --redundant-slots 2
expect compare_budget 0 "budget: 2 extra slots per layer" -- "${E[@]}" --compare eplb,grace --redundant-slots 2
expect frontier 0 "12.5%" -- "${E[@]}" --frontier 0,12.5%
expect frontier_json 0 '"redundant_slots": 4' -- "${E[@]}" --frontier 12.5% --json

echo "$failures failed"
[[ $failures -eq 0 ]]
