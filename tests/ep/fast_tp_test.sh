#!/usr/bin/env bash
# --compute fast under expert and tensor parallelism: the fast kernels compute every output in
# an order independent of M and of how rows are split, and each TP rank builds W_uk^T for its own
# heads only (model/absorbed_uk.h), so one process, EP 2 and EP 2 with TP 2 give the same tokens
# and logits, bit for bit (the one-process run rounds expert inputs to FP8 as the dispatch does).
# Skipped (77) on a CPU without a fast kernel, where fast runs exact and ep.overlap covers it.
# Usage: fast_tp_test.sh EPSERVE WORKDIR
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
source "$HERE/generate_runs.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --dtype fp8 --seed 9 --out "$WORK/model" >/dev/null
P=(--prompt-ids 17 --prompt-ids "$(seq -s, 1 7)" --prompt-ids "$(seq -s, 200 232)")
MAX_TOKENS=6
run one -- --compute fast --expert-input fp8
if grep -q "^compute: fast (no " "$WORK/one.out"; then
  echo "SKIP: this CPU has no fast kernel (AMX or AVX512-BF16): --compute fast runs exact here"
  exit 77
fi
grep "^compute: fast" "$WORK/one.out"
run ep2 "${MPIRUN[@]}" -np 2 -- --compute fast --timeout 120
run tp2 "${MPIRUN[@]}" -np 2 -- --compute fast --tp 2 --timeout 120
same ep2 one
same tp2 one
