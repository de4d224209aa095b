#!/usr/bin/env bash
# MTP speculative decoding end to end (docs/serving-engine.md, "MTP"), on a tiny model whose MTP
# module drafts well (make-model --mtp-weights from-main):
#  - one process: generate --mtp on gives the tokens and logits of --mtp off, bit for bit, and
#    prints its acceptance;
#  - under mpirun (EP over 2 ranks, then 4 ranks with TP 2): --mtp on gives the single-process
#    tokens, logits within 1e-4 (the EP tests' bound);
#  - --mtp on with a model that has no MTP module fails with one line naming the flag.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../ep/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --mtp-weights from-main --seed 3 --out "$WORK/model" >/dev/null
PROMPTS=(--prompt-ids 10,11,12 --prompt-ids "$(seq -s, 100 140)" --prompt-ids 7 --prompt-ids "$(seq -s, 300 317)")
run() {  # run NAME [args...]
  local name=$1
  shift
  timeout 300 "$@" --model "$WORK/model" "${PROMPTS[@]}" --max-tokens 24 --ignore-eos \
    --logits-out "$WORK/$name.npy" --tokens-out "$WORK/$name.json" >"$WORK/$name.out"
}
run off "$EPSERVE" generate --mtp off
run on "$EPSERVE" generate --mtp on
cmp "$WORK/off.json" "$WORK/on.json"
cmp "$WORK/off.npy" "$WORK/on.npy"
grep -E "^mtp: [0-9]+ drafts, [0-9]+ accepted" "$WORK/on.out"
if grep -q "^mtp:" "$WORK/off.out"; then echo "FAIL: --mtp off printed MTP stats"; exit 1; fi
# Expert parallelism dispatches FP8 rows: the single-process reference rounds alike.
run single_fp8 "$EPSERVE" generate --mtp off --expert-input fp8
run ep2 "${MPIRUN[@]}" -np 2 "$EPSERVE" generate --mtp on --timeout 120
run ep4 "${MPIRUN[@]}" -np 4 "$EPSERVE" generate --mtp on --tp 2 --timeout 120
for r in ep2 ep4; do
  grep -E "^mtp: [0-9]+ drafts, [0-9]+ accepted" "$WORK/$r.out"
  /usr/bin/python3 "$HERE/../reference/compare.py" --engine-logits "$WORK/$r.npy" \
    --ref-logits "$WORK/single_fp8.npy" --engine-tokens "$WORK/$r.json" \
    --ref-tokens "$WORK/single_fp8.json" --tol 1e-4
done
"$EPSERVE" make-model --preset tiny-v2 --out "$WORK/nomtp" >/dev/null
set +e
timeout 60 "$EPSERVE" generate --model "$WORK/nomtp" --prompt-ids 1,2 --mtp on >"$WORK/bad.out" 2>&1
rc=$?
set -e
cat "$WORK/bad.out"
[[ $rc == 1 ]]
grep -q "num_nextn_predict_layers is 0" "$WORK/bad.out"
echo "mtp: identical outputs in one process and under mpirun"
