#!/usr/bin/env bash
# The planner's roofline model applied to the CPU engine, end to end (docs/planner.md, "The CPU
# engine"): measure this machine's kernels with `epserve bench kernels --json` (twice: 64 MiB and
# 1 MiB decode matmuls, so the per-call overhead and the bandwidth share separate), turn them into
# a calibration CSV and a catalog entry (`plan import-bench`), fit the efficiency factors
# (`plan calibrate`), predict the decode step of the bench model on one rank (`plan layer`) and
# compare with the measured `epserve bench decode` step time.
#
# Usage: scripts/cpu_prediction.sh [--epserve BIN] [--out DIR] [--batches 1,8,32] [--skip-bench]
#   --skip-bench reuses kernels*.json and decode.json already in DIR (re-fit and re-predict only).
# Prints a table (batch, measured ms, predicted ms and error with the kernel run's memory roof
# and with the decode run's own) and writes DIR/prediction.json.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${EPSERVE:-$root/build-planner/tools/epserve}
out=/tmp/epserve-cpu-prediction
batches=1,8,32
skip_bench=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --epserve) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --skip-bench) skip_bench=1; shift ;;
    *) echo "usage: $0 [--epserve BIN] [--out DIR] [--batches 1,8,32] [--skip-bench]" >&2; exit 2 ;;
  esac
done
[[ -x $bin ]] || { echo "error: no epserve binary at $bin (build first, or pass --epserve)" >&2; exit 1; }
mkdir -p "$out"
py=/usr/bin/python3

# The run this script times: 64-token prompts, 8 timed steps; attention then reads 65..72 cached
# tokens, 68.5 on average.
prompt_len=64
steps=8
kv_len=68

if [[ $skip_bench == 0 ]]; then
  echo "== bench kernels (64 MiB and 1 MiB decode matmuls)" >&2
  "$bin" bench kernels --json > "$out/kernels.json"
  "$bin" bench kernels --json --decode-mib 1 > "$out/kernels-small.json"
  echo "== bench decode (batches $batches)" >&2
  "$bin" bench decode --json --batches "$batches" --prompt-len $prompt_len --steps $steps \
    > "$out/decode.json"
fi

model_dir=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"])' "$out/decode.json")

echo "== import, calibrate" >&2
"$bin" plan import-bench --kernels "$out/kernels.json" --kernels "$out/kernels-small.json" \
  --csv "$out/measured.csv" --hardware-out "$out/cpu.json"
"$bin" plan calibrate --hardware "$out/cpu.json" --gpu cpu --measured "$out/measured.csv" \
  --out "$out/cpu-efficiency.json" --json > "$out/calibration.json"
"$bin" plan calibrate --hardware "$out/cpu.json" --gpu cpu --measured "$out/measured.csv" >&2

# The factors are fractions of the roofs. On a shared machine the bandwidth left to us moves
# between runs, so the step is also predicted with the memory roof bench decode measured in its
# own run (same factors, same compute roof).
"$py" - "$out" <<'EOF'
import json, sys
out = sys.argv[1]
cat = json.load(open(f"{out}/cpu.json"))
cat["gpus"][0]["memory_bandwidth_tbs"] = json.load(open(f"{out}/decode.json"))["read_bandwidth_gbps"] / 1e3
cat["_comment"] += "; memory roof: the bench decode run's own streaming-read probe"
json.dump(cat, open(f"{out}/cpu-at-decode.json", "w"), indent=2)
EOF

echo "== predict" >&2
for b in ${batches//,/ }; do
  for roof in cpu cpu-at-decode; do
    "$bin" plan layer --hardware "$out/$roof.json" --gpu cpu --efficiency "$out/cpu-efficiency.json" \
      --model "$model_dir/config.json" --ep 1 --tp 1 --batch "$b" --kv-len $kv_len --query-len 1 \
      --kv-element-bytes 4 --overlap none --ignore-memory --json > "$out/predict-$roof-b$b.json"
  done
done

"$py" - "$out" "$batches" <<'EOF'
import json, sys
out, batches = sys.argv[1], [int(b) for b in sys.argv[2].split(",")]
decode = json.load(open(f"{out}/decode.json"))
hw = json.load(open(f"{out}/cpu.json"))["gpus"][0]
measured = {r["batch"]: r for r in decode["rows"]}
rows = []
print(f"machine: bench kernels {hw['memory_bandwidth_tbs']*1e3:.2f} GB/s read, {hw['fp8_tflops']*1e3:.1f} GFLOP/s; "
      f"bench decode probe {decode['read_bandwidth_gbps']:.2f} GB/s; {decode['threads']} threads")
print(f"{'batch':>5} {'measured ms':>12} {'predicted ms':>13} {'error':>8} {'at decode roof':>15} {'error':>8}"
      f"   split at decode roof (ms): moe / dense / lm_head / overhead")
for b in batches:
    k = json.load(open(f"{out}/predict-cpu-b{b}.json"))["step"]
    p = json.load(open(f"{out}/predict-cpu-at-decode-b{b}.json"))["step"]
    m = measured[b]["step_ms"]
    pred_k, pred = k["step_us"] / 1e3, p["step_us"] / 1e3
    r = {"batch": b, "measured_ms": m,
         "predicted_ms_kernels_roof": pred_k, "error_kernels_roof": pred_k / m - 1,
         "predicted_ms_decode_roof": pred, "error_decode_roof": pred / m - 1,
         "moe_ms": p["moe_layers_us"] / 1e3, "dense_ms": p["dense_layers_us"] / 1e3,
         "lm_head_ms": p["lm_head_us"] / 1e3, "overhead_ms": p["overhead_us"] / 1e3,
         "experts_touched_predicted": p["moe_layer"]["routing"]["touched_experts"],
         "experts_touched_measured": measured[b]["experts_touched_per_layer"]}
    rows.append(r)
    print(f"{b:>5} {m:>12.2f} {pred_k:>13.2f} {100*r['error_kernels_roof']:>7.1f}% {pred:>15.2f} "
          f"{100*r['error_decode_roof']:>7.1f}%   {r['moe_ms']:.2f} / {r['dense_ms']:.2f} / {r['lm_head_ms']:.2f} / "
          f"{r['overhead_ms']:.2f}  (experts/layer: model {r['experts_touched_predicted']:.1f}, "
          f"engine {r['experts_touched_measured']:.1f})")
json.dump({"machine": hw, "decode_read_bandwidth_gbps": decode["read_bandwidth_gbps"], "rows": rows},
          open(f"{out}/prediction.json", "w"), indent=2)
EOF
