#!/usr/bin/env bash
# Engine vs the float64 reference at DeepSeek-V3.2's real shapes: make-model --preset v32
# --layers 4 (its three dense layers and its first MoE layer: 7168 hidden, 128 heads, MLA
# 512+64, the indexer's 64 heads x 128, 256 experts of 2048, vocabulary 129,280), BF16 or FP8.
# Two cases, 3 greedy steps each, in one engine run per checkpoint:
#   - as released (index_topk 2048): prompts of 1 and 7 tokens, where DSA equals dense MLA;
#   - the same weights with index_topk 16 in config.json (hard links, nothing else changed):
#     a prompt of 24 tokens, so the indexer chooses at every query past 16 positions.
# Tokens identical and logits within 1e-3 (compare.py), the bound of the tiny presets; then
# mpirun -np 4 --tp 2 bit-exact to one process.
# In CTest as reference.v32-layers4.{fp8,bf16}, skipped unless EPSERVE_REAL_SHAPES=DIR: it writes
# a 17 GB (FP8) or 30 GB (BF16) checkpoint there (kept for the next run), and the reference
# needs ~20 GB of memory and minutes per case on 2 cores (--cache-gb bounds its weights).
# Usage: run_real_shape_check.sh EPSERVE DTYPE WORKDIR [CACHE_GB]
set -euo pipefail
EPSERVE=$1 DTYPE=$2 WORK=$3 CACHE_GB=${4:-6}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$WORK"
MODEL=$WORK/v32-l4-$DTYPE
# Without the MTP module (another MoE layer of 256 experts); kept between runs.
if ! ls "$MODEL"/*.safetensors >/dev/null 2>&1; then
  rm -rf "$MODEL"
  "$EPSERVE" make-model --preset v32 --layers 4 --mtp-layers 0 --dtype "$DTYPE" --seed 3 \
    --allow-large --out "$MODEL"
fi
SMALL=$WORK/v32-l4-$DTYPE-topk16
rm -rf "$SMALL" && mkdir -p "$SMALL"
for f in "$MODEL"/*; do [[ $(basename "$f") == config.json ]] || ln "$f" "$SMALL/"; done
/usr/bin/python3 - "$MODEL/config.json" "$SMALL/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
assert c["model_type"] == "deepseek_v32" and c["index_topk"] == 2048, c
c["index_topk"] = 16
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
check() {  # model dir, tag, prompts...
  local dir=$1 tag=$2
  shift 2
  local prompts=()
  for p in "$@"; do prompts+=(--prompt-ids "$p"); done
  /usr/bin/time -f "engine: %e s, peak RSS %M KB" "$EPSERVE" generate --model "$dir" "${prompts[@]}" \
    --max-tokens 3 --ignore-eos --weights mapped --logits-out "$WORK/$tag.engine.npy" --tokens-out "$WORK/$tag.engine.json"
  /usr/bin/time -f "reference: %e s, peak RSS %M KB" /usr/bin/python3 "$HERE/reference.py" \
    --model "$dir" "${prompts[@]}" --max-tokens 3 --cache-gb "$CACHE_GB" \
    --logits-out "$WORK/$tag.ref.npy" --tokens-out "$WORK/$tag.ref.json"
  /usr/bin/python3 "$HERE/compare.py" --engine-logits "$WORK/$tag.engine.npy" \
    --ref-logits "$WORK/$tag.ref.npy" --engine-tokens "$WORK/$tag.engine.json" \
    --ref-tokens "$WORK/$tag.ref.json" --tol 1e-3
}
check "$MODEL" "$DTYPE-topk2048" 17 1,2,3,4,5,6,7
check "$SMALL" "$DTYPE-topk16" "$(seq -s, 300 323)"
# Expert parallelism at these shapes: mpirun -np 4 --tp 2 (two DP groups of two TP ranks, 64
# experts a rank) bit-exact to one process with the dispatch format's rounding (the EP contract,
# tests/ep/run_ep_test.sh), the topk16 model so the indexer chooses.
source "$HERE/../ep/mpi_env.sh"
EP_PROMPTS=(--prompt-ids "$(seq -s, 300 323)" --prompt-ids 1,2,3,4,5,6,7)
"$EPSERVE" generate --model "$SMALL" "${EP_PROMPTS[@]}" --max-tokens 3 --ignore-eos --weights mapped \
  --expert-input fp8 --logits-out "$WORK/$DTYPE.single.npy" --tokens-out "$WORK/$DTYPE.single.json" >/dev/null
"${MPIRUN[@]}" -np 4 "$EPSERVE" generate --model "$SMALL" "${EP_PROMPTS[@]}" --max-tokens 3 --ignore-eos \
  --weights mapped --tp 2 --ranks-per-node 2 --timeout 1200 --logits-out "$WORK/$DTYPE.ep.npy" \
  --tokens-out "$WORK/$DTYPE.ep.json" >"$WORK/$DTYPE.ep.out"
/usr/bin/python3 "$HERE/compare.py" --engine-logits "$WORK/$DTYPE.ep.npy" --ref-logits "$WORK/$DTYPE.single.npy" \
  --engine-tokens "$WORK/$DTYPE.ep.json" --ref-tokens "$WORK/$DTYPE.single.json" --tol 0
cmp "$WORK/$DTYPE.ep.npy" "$WORK/$DTYPE.single.npy" || { echo "FAIL: EP logits differ in their bits"; exit 1; }
echo "real-shape check ($DTYPE): ok"
