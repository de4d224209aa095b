#!/usr/bin/env bash
# --requant int8 under expert and tensor parallelism: every rank requantizes the weights it
# loads (its experts, and the attention and dense weights every rank holds) the same way, and
# the int8 kernel computes every output in an order independent of M and of how rows are split,
# so one process, EP 2 and EP 2 with TP 2 give the same tokens and logits, bit for bit (the
# one-process run rounds expert inputs to FP8 as the dispatch does). Runs on any CPU (without
# AVX512-VNNI on the scalar kernel).
# Usage: int8_test.sh EPSERVE WORKDIR
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
source "$HERE/generate_runs.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --dtype fp8 --seed 9 --out "$WORK/model" >/dev/null
P=(--prompt-ids 17 --prompt-ids "$(seq -s, 1 7)" --prompt-ids "$(seq -s, 200 232)")
MAX_TOKENS=6
run one -- --requant int8 --expert-input fp8
grep "requant: int8" "$WORK/one.out"
run exact -- --expert-input fp8
run ep2 "${MPIRUN[@]}" -np 2 -- --requant int8 --timeout 120
run tp2 "${MPIRUN[@]}" -np 2 -- --requant int8 --tp 2 --timeout 120
same ep2 one
same tp2 one
# The runs really differ from the checkpoint's weights.
if cmp -s "$WORK/one.npy" "$WORK/exact.npy"; then
  echo "FAIL: --requant int8 gave the exact logits"
  exit 1
fi
