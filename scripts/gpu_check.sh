#!/usr/bin/env bash
# The one prepared GPU check, run on the GPU machine over what scripts/gpu_prepare.sh built here:
#   scripts/gpu_check.sh [CARRY_DIR]      (default build/gpu-carry)
# Parts, each with one summary line, then a verdict:
#   gpu    - the device (nvidia-smi)
#   ops    - every CUDA op against its CPU twin on random inputs (incl. DeepSeek-V3 shapes)
#   model  - tiny and tiny-v2, BF16 and FP8, f32 and bf16 cache: the GPU model against the CPU
#            engine on the reference prompts and 16 greedy steps
# Logs go to $OUT (the device tool's output folder) or /tmp/gpu_check. Bounded: each part has a
# timeout; the whole check takes about a minute on an H200.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=${1:-build/gpu-carry}
LOGS=${OUT:-/tmp/gpu_check}
mkdir -p "$LOGS"
export LD_LIBRARY_PATH="$CARRY/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
failed=0

# part NAME TIMEOUT CMD...: runs CMD, prints "NAME: PASS|FAIL (passed/failed/skipped, seconds)".
part() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  local passed failed_n skipped
  passed=$(grep -c '^\[       OK \]' "$LOGS/$name.log")
  failed_n=$(grep -c '^\[  FAILED  \] .*(' "$LOGS/$name.log")
  skipped=$(grep -c '^\[  SKIPPED \] .*(' "$LOGS/$name.log")
  if [[ $rc -eq 0 && $skipped -eq 0 && $passed -gt 0 ]]; then
    echo "$name: PASS ($passed passed, ${secs} s)"
  else
    echo "$name: FAIL (rc $rc, $passed passed, $failed_n failed, $skipped skipped, ${secs} s; $LOGS/$name.log)"
    grep -E '^\[  FAILED  \]|Failure|Expected|Which is|no GPU' "$LOGS/$name.log" | head -20
    failed=1
  fi
}

if nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$LOGS/gpu.log" 2>&1; then
  echo "gpu: $(head -1 "$LOGS/gpu.log")"
else
  echo "gpu: FAIL (nvidia-smi: $(head -1 "$LOGS/gpu.log"))"
  failed=1
fi
[[ -x $CARRY/cuda_test ]] || { echo "ops: FAIL (no $CARRY/cuda_test: run scripts/gpu_prepare.sh here first)"; exit 1; }
part ops 300 "$CARRY/cuda_test" --gtest_filter='-Presets/CudaModelTest.*'
part model 300 "$CARRY/cuda_test" --gtest_filter='Presets/CudaModelTest.*'
grep '^\[ cuda_model \]' "$LOGS/model.log" || true
if [[ $failed -eq 0 ]]; then echo "verdict: PASS"; else echo "verdict: FAIL"; fi
exit $failed
