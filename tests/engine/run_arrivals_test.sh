#!/usr/bin/env bash
# Continuous batching changes nothing a request computes: 50 greedy requests of mixed lengths
# arrive at random steps (some share prefixes, some are cancelled midway) and each must get
# exactly the tokens it gets when it runs alone in the engine (compare_runs.py).
# Usage: run_arrivals_test.sh EPSERVE WORKDIR MODE
#   MODE single  one process, f32 cache
#        bf16    one process, bf16 cache (against bf16 alone runs)
#        small   one process, a pool too small for all requests at once (preemption, recompute)
#        mpi     mpirun -np 4 --tp 2 (against alone runs with the dispatch-format rounding)
#        cuda    one process on the GPU (--device cuda), f32 cache, against alone runs on the GPU;
#                exit 77 (skipped) with the reason where no GPU can be used
#        cuda_bf16  the same with a bf16 cache
#        v4      DeepSeek-V4 (tiny-v4: window 8, compression ratios 4 and 16, index top-4) in one
#                process: its window, compressor state and compressed entries live in the same
#                paged rows, so prefix hits, chunks ending inside a group and cancellations all
#                come into play
#        v4_small  the same with a pool too small for all requests at once (preemption)
set -euo pipefail
EPSERVE=$1 WORK=$2 MODE=$3
HERE=$(cd "$(dirname "$0")" && pwd)
rm -rf "$WORK" && mkdir -p "$WORK"
VOCAB=()
if [[ $MODE == v4* ]]; then
  "$EPSERVE" make-model --preset tiny-v4 --dtype fp8 --seed 9 --out "$WORK/model" >/dev/null
  VOCAB=(--vocab 512)
else
  "$EPSERVE" make-model --preset tiny --dtype fp8 --seed 9 --out "$WORK/model" >/dev/null
fi
/usr/bin/python3 "$HERE/make_arrivals.py" mixed "$WORK/arrivals.jsonl" "$WORK/alone.jsonl" "${VOCAB[@]}"
ENGINE=(--max-batch-tokens 64)
ALONE=(--no-prefix-cache)
RUN=("$EPSERVE")
case $MODE in
  single) ;;
  bf16) ENGINE+=(--kv-dtype bf16) ;;
  small) ENGINE+=(--kv-memory 1800K) ;;  # 12 blocks of 64 positions: a quarter of the demand
  v4) ;;
  v4_small) ENGINE+=(--kv-memory 6M) ;;  # 7 blocks: two of the longest requests at once
  cuda | cuda_bf16)
    ENGINE+=(--device cuda)
    [[ $MODE == cuda_bf16 ]] && ENGINE+=(--kv-dtype bf16)
    if ! probe=$("$EPSERVE" generate --model "$WORK/model" --prompt-ids 1 --max-tokens 1 --device cuda 2>&1); then
      echo "SKIPPED: $(grep -m1 'error' <<<"$probe")"
      exit 77
    fi
    ;;
  mpi)
    source "$HERE/../ep/mpi_env.sh"
    RUN=("${MPIRUN[@]}" -np 4 "$EPSERVE")
    ENGINE+=(--tp 2 --ranks-per-node 2 --timeout 120)
    ALONE+=(--expert-input fp8)
    ;;
  *) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
ALONE_ENGINE=("${ENGINE[@]}")
[[ $MODE == mpi ]] && ALONE_ENGINE=(--max-batch-tokens 64)
[[ $MODE == small || $MODE == v4_small ]] && ALONE_ENGINE=(--max-batch-tokens 64)
timeout 300 "${RUN[@]}" generate --model "$WORK/model" --arrivals "$WORK/arrivals.jsonl" "${ENGINE[@]}" \
  --tokens-out "$WORK/cont.json" >"$WORK/cont.out"
timeout 300 "$EPSERVE" generate --model "$WORK/model" --arrivals "$WORK/alone.jsonl" "${ALONE_ENGINE[@]}" "${ALONE[@]}" \
  --tokens-out "$WORK/alone.json" >"$WORK/alone.out"
grep -E "^(KV cache|engine):" "$WORK/cont.out" || true
/usr/bin/python3 "$HERE/compare_runs.py" "$WORK/arrivals.jsonl" "$WORK/cont.json" "$WORK/alone.json"
if [[ $MODE == small || $MODE == v4_small ]]; then
  # The pool was too small: requests had to be preempted and recomputed.
  grep -E "^engine: .* [1-9][0-9]* preemptions" "$WORK/cont.out"
fi
