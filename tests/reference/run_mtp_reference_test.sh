#!/usr/bin/env bash
# The engine's MTP module against the independent PyTorch reference (mtp_reference.py): the
# logits of every draft made while generating 3 prompts (1, 7 and 33 tokens) for 16 greedy
# steps with --mtp on, max relative error <= 1e-3, and the same greedy drafts.
# Usage: run_mtp_reference_test.sh EPSERVE PRESET DTYPE WORKDIR
set -euo pipefail
EPSERVE=$1 PRESET=$2 DTYPE=$3 WORK=$4
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset "$PRESET" --dtype "$DTYPE" --seed 3 --out "$WORK/model" >/dev/null
PROMPTS=(--prompt-ids 17 --prompt-ids 1,2,3,4,5,6,7 --prompt-ids "$(seq -s, 200 232)")
"$EPSERVE" generate --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 16 --ignore-eos --mtp on \
  --draft-logits-out "$WORK/drafts.npy" --tokens-out "$WORK/engine.json" | grep "^mtp:"
/usr/bin/python3 "$HERE/mtp_reference.py" --model "$WORK/model" "${PROMPTS[@]}" \
  --engine-tokens "$WORK/engine.json" --draft-logits "$WORK/drafts.npy" --tol 1e-3
