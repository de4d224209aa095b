#!/bin/bash
# DeepSeek-V4's CPU forward pass (src/model/v4, driven by v4_generate) against the independent
# float64 reference (reference_v4.py --numerics exact) on a tiny random V4 checkpoint
# (v4_checkpoint.py: window 8, compress_ratios [0, 4, 16, 4], index_topk 4): prompts shorter than
# the window (5), longer (20), ending inside a compression group (23) and with more compressed
# entries than index_topk (41), 16 greedy steps; and an 11-token prompt decoded 64 steps (75
# positions: the window of 8 rolls over 9 times, 18 groups of 4 and 4 of 16 complete while
# decoding); tokens identical, logits within 1e-3 relative.
#   run_v4_reference_test.sh setup DTYPE WORKDIR          checkpoint + the reference's outputs
#   run_v4_reference_test.sh check V4_GENERATE WORKDIR CHUNK   engine run (CHUNK 0: whole-prompt
#                                                         prefill) compared with them
#   run_v4_reference_test.sh decode64 V4_GENERATE WORKDIR  the 64-step decode
# CTest runs `setup` once per dtype as a fixture of the whole and chunked checks.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
cd "$HERE/../.."
P1=5,9,13,77,200
P2=$(seq -s, 10 29)
P3=$(seq -s, 30 52)
P4=$(seq -s, 100 140)
PROMPTS=(--prompt-ids "$P1" --prompt-ids "$P2" --prompt-ids "$P3" --prompt-ids "$P4")
LONG=(--prompt-ids 7,8,9,10,11,12,13,14,15,16,17 --max-tokens 64)
case "$1" in
  setup)
    DTYPE=$2
    WORK=$3
    rm -rf "$WORK"
    mkdir -p "$WORK"
    $PY -c 'import sys; sys.path.insert(0, "tests/reference"); from v4_checkpoint import write_tiny_v4; write_tiny_v4(sys.argv[1], sys.argv[2], 0)' \
      "$WORK/model" "$DTYPE"
    $PY tests/reference/reference_v4.py --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 16 \
      --logits-out "$WORK/ref.npy" --tokens-out "$WORK/ref.json"
    $PY tests/reference/reference_v4.py --model "$WORK/model" "${LONG[@]}" \
      --logits-out "$WORK/ref64.npy" --tokens-out "$WORK/ref64.json"
    ;;
  decode64)
    GEN=$2
    WORK=$3
    "$GEN" --model "$WORK/model" "${LONG[@]}" --logits-out "$WORK/engine64.npy" \
      --tokens-out "$WORK/engine64.json"
    $PY tests/reference/compare.py --engine-logits "$WORK/engine64.npy" \
      --ref-logits "$WORK/ref64.npy" --engine-tokens "$WORK/engine64.json" \
      --ref-tokens "$WORK/ref64.json" --tol 1e-3
    ;;
  check)
    GEN=$2
    WORK=$3
    CHUNK=$4
    "$GEN" --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 16 --chunk "$CHUNK" \
      --logits-out "$WORK/engine-$CHUNK.npy" --tokens-out "$WORK/engine-$CHUNK.json"
    $PY tests/reference/compare.py --engine-logits "$WORK/engine-$CHUNK.npy" \
      --ref-logits "$WORK/ref.npy" --engine-tokens "$WORK/engine-$CHUNK.json" \
      --ref-tokens "$WORK/ref.json" --tol 1e-3
    ;;
  *)
    echo "usage: $0 setup DTYPE WORKDIR | check V4_GENERATE WORKDIR CHUNK | decode64 V4_GENERATE WORKDIR" >&2
    exit 2
    ;;
esac
