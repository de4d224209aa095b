#!/usr/bin/env bash
# --overlap none|dispatch|microbatch|auto (docs/expert-parallelism.md, "Overlap"): every mode
# gives the same tokens and logits, bit for bit,
#   - in one process (the micro-batches there only change the order of the work);
#   - under mpirun: 4 ranks on 2 "machines", then 4 ranks with TP 2, then with MTP on, each
#     equal to the same run with --overlap dispatch;
#   - with --trace-out: the recorded routing is the same file;
# and auto resolves --microbatch-from, or the planner's crossover from a hardware catalog.
# Usage: overlap_test.sh EPSERVE WORKDIR
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
source "$HERE/generate_runs.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --dtype fp8 --seed 5 --out "$WORK/model" >/dev/null
P=(--prompt-ids 10 --prompt-ids "$(seq -s, 60 66)" --prompt-ids "$(seq -s, 110 142)" --prompt-ids 160,161,162)
MAX_TOKENS=12
split() {  # split NAME: prints "S of N"; S passes of N ran as two micro-batches
  sed -nE 's/^overlap: [a-z]+, ([0-9]+) of ([0-9]+) passes in two micro-batches$/\1 of \2/p' "$WORK/$1.out"
}

# One process.
# Expert parallelism dispatches FP8 rows: the one-process runs round alike (--expert-input fp8).
run dispatch -- --expert-input fp8 --overlap dispatch --trace-out "$WORK/dispatch.trace"
for m in none microbatch; do
  run "$m" -- --expert-input fp8 --overlap "$m" --trace-out "$WORK/$m.trace"
  same "$m" dispatch
  cmp "$WORK/$m.trace" "$WORK/dispatch.trace" || { echo "FAIL: $m trace differs"; exit 1; }
done
run auto8 -- --expert-input fp8 --overlap auto --microbatch-from 8
same auto8 dispatch
# Every pass splits under microbatch; with auto from 8 tokens only the prompt pass (44 tokens),
# not the decode passes of 4 tokens.
[[ $(split microbatch) == "12 of 12" ]] || { echo "FAIL: microbatch split $(split microbatch)"; exit 1; }
[[ $(split auto8) == "1 of 12" ]] || { echo "FAIL: auto from 8 split $(split auto8)"; exit 1; }
[[ $(split dispatch) == "0 of 12" ]] || { echo "FAIL: dispatch split $(split dispatch)"; exit 1; }

# A hardware catalog for the planner: the shapes of a CPU rank pair on a 1 Gbit/s link.
cat >"$WORK/cpu.json" <<'JSON'
{"gpus": [{"name": "cpu", "description": "test CPU ranks", "fp8_tflops": 0.3, "bf16_tflops": 0.3,
  "memory_gb": 16, "memory_bandwidth_tbs": 0.04, "nvlink_gbs": 10, "nvlink_latency_us": 1,
  "infiniband_gbs": 0.125, "infiniband_latency_us": 1000, "gpus_per_machine": 2}]}
JSON
run auto_planner -- --expert-input fp8 --overlap auto --planner-hardware "$WORK/cpu.json"
grep -E "^overlap auto: cpu, .*micro-batching from [0-9]+ tokens" "$WORK/auto_planner.out"
same auto_planner dispatch

# Under mpirun: EP 4 on two machines of 2 ranks; TP 2; MTP.
EP=("${MPIRUN[@]}" -np 4)
run ep_dispatch "${EP[@]}" -- --ranks-per-node 2 --overlap dispatch --timeout 120
for m in none microbatch; do
  run "ep_$m" "${EP[@]}" -- --ranks-per-node 2 --overlap "$m" --timeout 120
  same "ep_$m" ep_dispatch
done
run ep_auto "${EP[@]}" -- --ranks-per-node 2 --overlap auto --planner-hardware "$WORK/cpu.json" --timeout 120
grep -E "^overlap auto: cpu, EP4 DP4 TP1 on 2 machines" "$WORK/ep_auto.out"
same ep_auto ep_dispatch
# Ranks hold 1 request each: from 4 tokens only the prompt pass of rank 2 (33 tokens) qualifies,
# and every rank must split it alike (the step's size is agreed over the ranks).
run ep_auto4 "${EP[@]}" -- --ranks-per-node 2 --overlap auto --microbatch-from 4 --timeout 120
same ep_auto4 ep_dispatch
[[ $(split ep_auto4) == "1 of 12" ]] || { echo "FAIL: EP auto from 4 split $(split ep_auto4)"; exit 1; }
[[ $(split ep_microbatch) == "12 of 12" ]] || { echo "FAIL: EP microbatch split $(split ep_microbatch)"; exit 1; }
run tp_dispatch "${EP[@]}" -- --tp 2 --overlap dispatch --timeout 120
run tp_microbatch "${EP[@]}" -- --tp 2 --overlap microbatch --timeout 120
same tp_microbatch tp_dispatch
run mtp_dispatch "${EP[@]}" -- --mtp on --overlap dispatch --timeout 120
run mtp_microbatch "${EP[@]}" -- --mtp on --overlap microbatch --timeout 120
same mtp_microbatch mtp_dispatch
# And EP equals the single process (the EP tests' bound; here the bits agree too).
/usr/bin/python3 "$HERE/../reference/compare.py" --engine-logits "$WORK/ep_microbatch.npy" \
  --ref-logits "$WORK/microbatch.npy" --engine-tokens "$WORK/ep_microbatch.json" \
  --ref-tokens "$WORK/microbatch.json" --tol 1e-4
echo "overlap: identical outputs in every mode"
