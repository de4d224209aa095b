#!/usr/bin/env bash
# A request's logits do not depend on what is batched with it (docs/kernels.md, "Batch
# invariance"), under expert parallelism as in one process: prompt A run alone, then among
# longer prompts that take A's DP group past 64 tokens a step (the tiny model's dense down
# projection, K = 512, then multiplies more rows than the old decode-size paths covered) and
# give every expert rows from every rank; A's logits rows must be the same bits in every run:
#   - one process (expert inputs rounded as the dispatch does), alone and batched;
#   - mpirun -np 2, alone and batched (= the one-process run);
#   - mpirun -np 4 --tp 2 with a placement with replicas and micro-batching, batched with
#     256-token steps and with 48-token steps (chunked prefill).
# With PRESET tiny-v32 (DeepSeek-V3.2's sparse attention, index_topk 16) the same holds for
# the positions the indexer selects: A's prompt is longer than index_topk.
# Usage: batch_invariance_test.sh EPSERVE WORKDIR [PRESET]
set -euo pipefail
EPSERVE=$1 WORK=$2 PRESET=${3:-tiny}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
source "$HERE/generate_runs.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset "$PRESET" --dtype fp8 --seed 5 --out "$WORK/model" >/dev/null
/usr/bin/python3 "$HERE/make_placement.py" skewed4 "$WORK/model/config.json" "$WORK/placement.json"
MAX_TOKENS=8
A=(--prompt-ids "$(seq -s, 10 30)")
# With 2 groups A's group gets prompts 0, 2 and 4 (131 tokens), the other 1 and 3.
BATCH=("${A[@]}" --prompt-ids 7,8,9 --prompt-ids "$(seq -s, 100 180)" --prompt-ids "$(seq -s, 300 305)"
  --prompt-ids "$(seq -s, 400 428)")

# same_as_alone NAME: sequence 0 of NAME (tokens and logits rows, bit for bit) equals alone1's;
# counts a failure otherwise (every run is checked, the test fails at the end).
FAILED=0
same_as_alone() {
  /usr/bin/python3 - "$WORK/alone1" "$WORK/$1" <<'PYEOF' || { echo "FAIL: $1: A differs from its alone run"; FAILED=$((FAILED + 1)); return; }
import json, sys
import numpy as np
a, b = sys.argv[1], sys.argv[2]
ta, tb = json.load(open(a + ".json"))["tokens"][0], json.load(open(b + ".json"))["tokens"][0]
la, lb = np.load(a + ".npy")[0], np.load(b + ".npy")[0]
if ta != tb:
    sys.exit(f"tokens {ta} vs {tb}")
diff = la.view(np.uint32) != lb.view(np.uint32)
if diff.any():
    steps = sorted(set(np.nonzero(diff)[0].tolist()))
    sys.exit(f"logits differ at steps {steps}, max |diff| {np.abs(la - lb).max():.3g}")
PYEOF
  echo "$1: A = alone"
}

P=("${A[@]}")
run alone1 -- --expert-input fp8
P=("${BATCH[@]}")
run batch1 -- --expert-input fp8
same_as_alone batch1

P=("${A[@]}")
run alone2 "${MPIRUN[@]}" -np 2 -- --timeout 120
same_as_alone alone2
P=("${BATCH[@]}")
run batch2 "${MPIRUN[@]}" -np 2 -- --timeout 120
same_as_alone batch2

TP=("${MPIRUN[@]}" -np 4 -- --tp 2 --placement "$WORK/placement.json" --overlap microbatch --timeout 120)
run batch4 "${TP[@]}"
same_as_alone batch4
run batch4_chunked "${TP[@]}" --max-batch-tokens 48
same_as_alone batch4_chunked
[[ $FAILED == 0 ]] || { echo "FAIL: $FAILED runs differ"; exit 1; }
echo "batch invariance: A's logits identical alone and batched, in one process and under EP"
