#!/usr/bin/env bash
# Engine vs the float64 reference (reference_v4.py) at DeepSeek-V4-Flash's real shapes (issue 50):
# make-model --preset v4-flash --layers 4 --dtype fp8 (hidden 4096, 64 heads x 512, q_lora 1024,
# 8 output groups of rank 1024, the indexer's 64 heads x 128, 4 HC streams, 256 FP4 experts of
# 2048 (top 6), vocabulary 129,280; layers 0-1 window-only, 2 ratio 4 (indexed), 3 ratio 128;
# layers 0-2 hash-routed), ~14 GB. Two cases, 3 greedy steps each, one engine run per case:
#   - as released (sliding_window 128, index_topk 512): prompts of 7 and 40 tokens (10 complete
#     groups of 4), inside the window and the top-k, as any cheap run is;
#   - the same weights (hard links) with sliding_window 8 and index_topk 4 in config.json: the
#     40-token prompt, so the window slides and the indexer chooses 4 of up to 10 entries.
# Tokens identical and logits within 1e-3 (compare.py), the bound of the tiny presets. Prints
# per case the engine's and the reference's wall time and peak RSS (/usr/bin/time -v).
# In CTest as reference.v4-flash-layers4, skipped unless EPSERVE_REAL_SHAPES=DIR (the checkpoint
# is written there and kept for the next run; 16.4 GB). The reference keeps at most CACHE_GB of
# float64 weights (--cache-gb; default 6: the dense weights, ~5 GB) and decodes the routed experts
# at each use. Measured on 2 cores (2026-12): make-model 8 min; engine 14 s / 8 s; reference
# 5.5 min / 4.6 min, peak RSS ~15 GB (the checkpoint's mapped pages included; the engine's ~10 GB).
# Usage: run_v4_real_shape_check.sh DIR [EPSERVE [CACHE_GB]]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$1 EPSERVE=${2:-$HERE/../../build/tools/epserve} CACHE_GB=${3:-6}
PY=/usr/bin/python3
export HERE
mkdir -p "$WORK"
MODEL=$WORK/v4f-l4-fp8
if ! ls "$MODEL"/*.safetensors >/dev/null 2>&1; then
  rm -rf "$MODEL"
  "$EPSERVE" make-model --preset v4-flash --layers 4 --dtype fp8 --seed 3 --allow-large \
    --out "$MODEL"
fi
SMALL=$WORK/v4f-l4-fp8-w8-topk4
rm -rf "$SMALL" && mkdir -p "$SMALL"
for f in "$MODEL"/*; do [[ $(basename "$f") == config.json ]] || ln "$f" "$SMALL/"; done
$PY - "$MODEL/config.json" "$SMALL/config.json" <<'PY'
import json, os, sys
c = json.load(open(sys.argv[1]))
assert c["model_type"] == "deepseek_v4" and c["hidden_size"] == 4096, c
assert c["sliding_window"] == 128 and c["index_topk"] == 512, c
assert c["compress_ratios"] == [0, 0, 4, 128], c["compress_ratios"]
c["sliding_window"], c["index_topk"] = 8, 4
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
SUMMARY=$WORK/summary.txt
: >"$SUMMARY"
timed() {  # label, log, command...: runs it under /usr/bin/time -v, appends time and RSS
  local label=$1 log=$2
  shift 2
  /usr/bin/time -v -o "$log.time" "$@" >"$log" 2>&1 || { cat "$log" "$log.time"; return 1; }
  local wall rss
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log.time")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log.time")
  echo "$label: $wall wall, peak RSS $((rss / 1024)) MB" | tee -a "$SUMMARY"
}
check() {  # model dir, tag, prompts...
  local dir=$1 tag=$2
  shift 2
  local prompts=()
  for p in "$@"; do prompts+=(--prompt-ids "$p"); done
  timed "$tag engine" "$WORK/$tag.engine.log" "$EPSERVE" generate --model "$dir" "${prompts[@]}" \
    --max-tokens 3 --ignore-eos --logits-out "$WORK/$tag.engine.npy" \
    --tokens-out "$WORK/$tag.engine.json" || return 1
  timed "$tag reference" "$WORK/$tag.ref.log" $PY "$HERE/reference_v4.py" --model "$dir" \
    "${prompts[@]}" --max-tokens 3 --cache-gb "$CACHE_GB" --logits-out "$WORK/$tag.ref.npy" \
    --tokens-out "$WORK/$tag.ref.json" || return 1
  grep '^sequence' "$WORK/$tag.ref.log" | sed "s/^/$tag reference: /" | tee -a "$SUMMARY"
  $PY - "$WORK/$tag" <<'PY' | sed "s/^/$tag: /" | tee -a "$SUMMARY"
import json, os, sys
import numpy as np
sys.path.insert(0, os.environ["HERE"])
from compare import row_rel_errors
t = sys.argv[1]
rel = row_rel_errors(np.load(t + ".engine.npy"), np.load(t + ".ref.npy"))
e, r = (json.load(open(t + x))["tokens"] for x in (".engine.json", ".ref.json"))
for s in range(rel.shape[0]):
    print(f"sequence {s}: max rel err {rel[s].max():.3e}, tokens engine {e[s]} ref {r[s]} "
          f"{'identical' if e[s] == r[s] else 'DIFFER'}")
PY
  $PY "$HERE/compare.py" --engine-logits "$WORK/$tag.engine.npy" --ref-logits "$WORK/$tag.ref.npy" \
    --engine-tokens "$WORK/$tag.engine.json" --ref-tokens "$WORK/$tag.ref.json" --tol 1e-3 \
    2>&1 | sed "s/^/$tag compare: /" | tee -a "$SUMMARY"
  return "${PIPESTATUS[0]}"
}
LONG=$(seq -s, 300 339)
status=0
check "$MODEL" w128-topk512 1,2,3,4,5,6,7 "$LONG" || status=1
check "$SMALL" w8-topk4 "$LONG" || status=1
if [[ $status != 0 ]]; then echo "FAIL: V4-Flash real-shape check (summary: $SUMMARY)"; exit 1; fi
echo "V4-Flash real-shape check: ok"
