#!/usr/bin/env bash
# Expert parallelism vs the single-process engine: the same prompts through
#   epserve generate --expert-input fp8            (one process, dispatch-format rounding)
#   mpirun -np N epserve generate [EP args]        (N ranks)
# must give identical greedy tokens and logits, bit for bit (every kernel gives a row the same bits
# whatever the rows beside it, docs/kernels.md "Batch invariance").
# Usage: run_ep_test.sh EPSERVE PRESET DTYPE WORKDIR NUM_PROMPTS NP [epserve args...]
set -euo pipefail
EPSERVE=$1 PRESET=$2 DTYPE=$3 WORK=$4 NUM_PROMPTS=$5 NP=$6
shift 6
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset "$PRESET" --dtype "$DTYPE" --seed 5 --out "$WORK/model" >/dev/null
# Prompts of lengths 1, 7, 33, 3, 12, ... (the first NUM_PROMPTS).
LENGTHS=(1 7 33 3 12 5 20 2)
PROMPTS=()
for ((i = 0; i < NUM_PROMPTS; i++)); do
  PROMPTS+=(--prompt-ids "$(seq -s, $((10 + 50 * i)) $((10 + 50 * i + LENGTHS[i] - 1)))")
done
# Placement files named in the arguments are made from a template by make_placement.py.
ARGS=()
for a in "$@"; do
  if [[ $a == placement:* ]]; then
    /usr/bin/python3 "$HERE/make_placement.py" "${a#placement:}" "$WORK/model/config.json" "$WORK/placement.json"
    ARGS+=(--placement "$WORK/placement.json")
  else
    ARGS+=("$a")
  fi
done
"$EPSERVE" generate --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 12 --ignore-eos --expert-input fp8 \
  --logits-out "$WORK/single.npy" --tokens-out "$WORK/single.json" >/dev/null
"${MPIRUN[@]}" -np "$NP" "$EPSERVE" generate --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 12 --ignore-eos --stats \
  --timeout 300 --logits-out "$WORK/ep.npy" --tokens-out "$WORK/ep.json" "${ARGS[@]}" >"$WORK/ep.out"
head -1 "$WORK/ep.out"
/usr/bin/python3 "$HERE/../reference/compare.py" --engine-logits "$WORK/ep.npy" --ref-logits "$WORK/single.npy" \
  --engine-tokens "$WORK/ep.json" --ref-tokens "$WORK/single.json" --tol 0
cmp "$WORK/ep.npy" "$WORK/single.npy" || { echo "FAIL: logits differ in their bits"; exit 1; }
grep -q "traffic per MoE layer" "$WORK/ep.out"
