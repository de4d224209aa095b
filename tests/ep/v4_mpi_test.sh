#!/usr/bin/env bash
# DeepSeek-V4 under expert parallelism vs one process: the same prompts through
#   epserve generate --expert-input fp8        (one process; expert inputs rounded to the
#                                               dispatch's FP8 format, ue8m0 scales as the config)
#   mpirun -np N epserve generate [EP args]    (every layer's experts spread over N ranks)
# must give identical greedy tokens and logits, bit for bit. Layouts: DP 2 x TP 2 on two logical
# machines, DP 4, DP 2, DP 8 with four idle groups (they still join every layer's exchange), and a
# hand-made placement with replicas.
# Usage: v4_mpi_test.sh EPSERVE WORKDIR
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
# The tiny V4 checkpoint (16 experts, 4 layers, window 8, vocab 512), FP8 weights, FP4 experts.
/usr/bin/python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from v4_checkpoint import write_tiny_v4; write_tiny_v4(sys.argv[2], "fp8", 9)' \
  "$HERE/../reference" "$WORK/model"
# Four prompts; the 41-token one is longer than the window (8) and than 16 compressed tokens.
PROMPTS=(--prompt-ids 3,17,99 --prompt-ids "$(seq -s, 20 60)" --prompt-ids 5 --prompt-ids "$(seq -s, 100 111)")
timeout 120 "$EPSERVE" generate --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 16 --ignore-eos \
  --expert-input fp8 --logits-out "$WORK/single.npy" --tokens-out "$WORK/single.json" >/dev/null
/usr/bin/python3 "$HERE/make_placement.py" skewed4 "$WORK/model/config.json" "$WORK/placement.json"
run() {
  local name=$1 np=$2
  shift 2
  echo "== -np $np $*"
  timeout 180 "${MPIRUN[@]}" -np "$np" "$EPSERVE" generate --model "$WORK/model" "${PROMPTS[@]}" \
    --max-tokens 16 --ignore-eos --timeout 120 --logits-out "$WORK/$name.npy" \
    --tokens-out "$WORK/$name.json" "$@" >"$WORK/$name.out"
  head -1 "$WORK/$name.out"
  /usr/bin/python3 "$HERE/../reference/compare.py" --engine-logits "$WORK/$name.npy" \
    --ref-logits "$WORK/single.npy" --engine-tokens "$WORK/$name.json" \
    --ref-tokens "$WORK/single.json" --tol 0
  cmp "$WORK/$name.npy" "$WORK/single.npy" || { echo "FAIL: $name: logits differ in their bits"; exit 1; }
}
run tp2 4 --tp 2 --ranks-per-node 2
run dp4 4 --tp 1
run dp2 2
run idle_groups 8 --ranks-per-node 4
run replicas 4 --placement "$WORK/placement.json"
# What V4 does not have under mpirun is refused by name, once.
set +e
timeout 60 "${MPIRUN[@]}" -np 2 "$EPSERVE" generate --model "$WORK/model" --prompt-ids 1,2 --stats \
  >"$WORK/refused.out" 2>&1
rc=$?
set -e
[[ $rc -ne 0 ]] || { echo "FAIL: --stats was accepted for V4 under mpirun"; exit 1; }
grep -q -- "--stats is not built for V4" "$WORK/refused.out" || { cat "$WORK/refused.out"; exit 1; }
echo "PASS"
