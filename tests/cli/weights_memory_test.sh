#!/bin/bash
# `generate --weights copied` (weights copied onto huge pages, the default) and `--weights mapped`
# (read from the checkpoint's file mapping) must give bit-identical logits: the copy changes
# where the bytes live, never what they are.
# Usage: weights_memory_test.sh EPSERVE WORKDIR
set -euo pipefail
bin=$1 work=$2
rm -rf "$work" && mkdir -p "$work"
"$bin" make-model --preset tiny --dtype fp8 --out "$work/model" > /dev/null
for m in copied mapped; do
  "$bin" generate --model "$work/model" --prompt-ids 1,2,3,4,5 --prompt-ids 7 --max-tokens 6 \
    --weights "$m" --logits-out "$work/$m.npy" > "$work/$m.txt"
done
cmp "$work/copied.npy" "$work/mapped.npy"
grep -q "sequence 0:" "$work/copied.txt"
echo "copied and mapped weights: identical logits"
