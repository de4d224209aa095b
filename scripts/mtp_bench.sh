#!/usr/bin/env bash
# MTP speculative decoding, measured and predicted (issue 13; docs/serving-engine.md, "MTP"):
# two FP8 bench checkpoints with an MTP module (make-model --mtp-layers 1), one whose draft agrees
# often (--mtp-weights from-main) and one with a random MTP module; `epserve bench mtp` decodes
# the same greedy requests with MTP off and on in one run and prints beside each batch what the
# planner predicts for that batch at the measured acceptance, calibrated to this machine
# (scripts/calibrate_cpu.sh).
#
# Usage: scripts/mtp_bench.sh [--epserve BIN] [--out DIR] [--batches 1,4,16] [--repeats 3]
#          [--decode-tokens 32] [--skip-calibration]
#   --skip-calibration: reuse DIR/cpu.json and DIR/cpu-efficiency.json
# Writes DIR/from-main.json, DIR/random.json and DIR/table.txt (both tables).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/tools/epserve
out=/tmp/epserve-mtp-bench
batches=1,4,16
repeats=3
decode_tokens=32
skip_cal=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --epserve) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --decode-tokens) decode_tokens=$2; shift 2 ;;
    --skip-calibration) skip_cal=1; shift ;;
    *) sed -n 9,12p "$0" >&2; exit 2 ;;
  esac
done
[[ -x $bin ]] || { echo "error: no epserve binary at $bin (build first, or pass --epserve)" >&2; exit 1; }
mkdir -p "$out"
for w in from-main random; do
  [[ -f $out/bench-mtp-$w/config.json ]] ||
    "$bin" make-model --preset bench --dtype fp8 --mtp-layers 1 --mtp-weights $w \
      --out "$out/bench-mtp-$w" >&2
done
if [[ $skip_cal == 0 ]]; then
  echo "== calibrate this machine's kernels" >&2
  "$root/scripts/calibrate_cpu.sh" "$bin" "$out"
fi
: >"$out/table.txt"
for w in from-main random; do
  echo "== bench mtp, MTP module $w" >&2
  args=(--model "$out/bench-mtp-$w" --batches "$batches" --repeats "$repeats"
        --decode-tokens "$decode_tokens" --planner-hardware "$out/cpu.json"
        --planner-efficiency "$out/cpu-efficiency.json")
  "$bin" bench mtp "${args[@]}" --json >"$out/$w.json"
  /usr/bin/python3 - "$out/$w.json" "$w" <<'PY' | tee -a "$out/table.txt"
import json, sys
r = json.load(open(sys.argv[1]))
print(f"\nbench FP8 + MTP module ({sys.argv[2]}), {r['threads']} threads, prompts {r['prompt_len']}, "
      f"{r['decode_tokens']} output tokens, median of {r['repeats']}; planner: {r.get('planner_hardware', '-')}, EP 1")
print("| batch | acceptance | tokens/step | off ms/step | MTP ms/step | measured speed-up | planned off ms | planned MTP ms | planned speed-up | same tokens |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|")
for x in r["rows"]:
    p = x.get("planned", {})
    print(f"| {x['batch']} | {100*x['acceptance']:.1f}% | {x['tokens_per_step']:.2f} | {x['off_step_ms']:.2f} | "
          f"{x['on_step_ms']:.2f} | {x['speedup']:.2f}x | {p.get('off_step_ms', 0):.2f} | {p.get('on_step_ms', 0):.2f} | "
          f"{p.get('speedup', 0):.2f}x | {'yes' if x['identical'] else 'NO'} |")
PY
done
