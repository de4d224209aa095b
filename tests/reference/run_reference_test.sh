#!/usr/bin/env bash
# Engine vs independent PyTorch reference on one preset and dtype:
# a batch of 3 prompts (1, 7 and 33 tokens), 16 greedy steps; tokens identical and logits
# max relative error <= 1e-3 (compare.py). Usage: run_reference_test.sh EPSERVE PRESET DTYPE WORKDIR [SHARDS]
set -euo pipefail
EPSERVE=$1 PRESET=$2 DTYPE=$3 WORK=$4 SHARDS=${5:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset "$PRESET" --dtype "$DTYPE" --seed 3 --shards "$SHARDS" --out "$WORK/model"
PROMPTS=(--prompt-ids 17 --prompt-ids 1,2,3,4,5,6,7 --prompt-ids "$(seq -s, 200 232)")
"$EPSERVE" generate --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 16 \
  --logits-out "$WORK/engine.npy" --tokens-out "$WORK/engine.json"
/usr/bin/python3 "$HERE/reference.py" --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 16 \
  --logits-out "$WORK/ref.npy" --tokens-out "$WORK/ref.json"
/usr/bin/python3 "$HERE/compare.py" --engine-logits "$WORK/engine.npy" --ref-logits "$WORK/ref.npy" \
  --engine-tokens "$WORK/engine.json" --ref-tokens "$WORK/ref.json" --tol 1e-3
