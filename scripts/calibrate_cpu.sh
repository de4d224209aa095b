#!/usr/bin/env bash
# Calibrates the planner to this machine's CPU kernels (docs/planner.md, "The CPU engine"):
# `epserve bench kernels` twice (64 MiB and 1 MiB decode matmuls, so the per-call overhead and
# the bandwidth share separate) -> `plan import-bench` -> `plan calibrate`.
# Usage: scripts/calibrate_cpu.sh BIN DIR
# Writes DIR/cpu.json (a hardware catalog with the entry "cpu") and DIR/cpu-efficiency.json.
set -euo pipefail
bin=$1 out=$2
mkdir -p "$out"
"$bin" bench kernels --json >"$out/kernels.json"
"$bin" bench kernels --json --decode-mib 1 >"$out/kernels-small.json"
"$bin" plan import-bench --kernels "$out/kernels.json" --kernels "$out/kernels-small.json" \
  --csv "$out/measured.csv" --hardware-out "$out/cpu.json" 2>/dev/null
"$bin" plan calibrate --hardware "$out/cpu.json" --gpu cpu --measured "$out/measured.csv" \
  --out "$out/cpu-efficiency.json" >/dev/null
