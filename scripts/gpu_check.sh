#!/usr/bin/env bash
# The one prepared GPU check, run on the GPU machine over what scripts/gpu_prepare.sh built here:
#   scripts/gpu_check.sh [CARRY_DIR]      (default build/gpu-carry)
# Parts, each with one summary line, then a verdict:
#   gpu    - the device (nvidia-smi)
#   ops    - every CUDA op against its CPU twin on random inputs (incl. DeepSeek-V3 shapes)
#   model  - tiny and tiny-v2, BF16 and FP8, f32 and bf16 cache: the GPU model against the CPU
#            engine on the reference prompts and 16 greedy steps
#   arrivals - `generate --device cuda`: 50 requests arriving over steps (prefix sharing,
#            cancellations) get the tokens each gets alone on the GPU (f32 and bf16 cache)
#   serve_openai - `epserve serve --device cuda` answers the official openai client (node and
#            the pinned package travel in the bundle): models, whole and streamed chat
#   serve_curl - the same server through curl: streamed == whole, chat and completions
#   oom    - a KV pool larger than the GPU: a clear error naming the cache
#   bench_v2lite, bench_v3_l4 - bench decode --device cuda at batch 1, 32, 128 on v2-lite (BF16)
#            and on v3's first 4 layers (FP8): tokens/s, bytes per step, GB/s against the copy
#            bandwidth
# Logs go to $OUT (the device tool's output folder) or /tmp/gpu_check. Bounded: each part has a
# timeout; the whole check takes about a minute on an H200.
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=${1:-build/gpu-carry}
LOGS=${OUT:-/tmp/gpu_check}
mkdir -p "$LOGS"
BUNDLE=$(mktemp -d /tmp/epserve-bundle.XXXXXX)
[[ -f $CARRY/bundle.tar.xz ]] || { echo "verdict: FAIL (no $CARRY/bundle.tar.xz: run scripts/gpu_prepare.sh here first)"; exit 1; }
tar -C "$BUNDLE" -xJf "$CARRY/bundle.tar.xz"
export LD_LIBRARY_PATH="$BUNDLE/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export PATH="$BUNDLE/bin:$PATH"
EPSERVE=$BUNDLE/bin/epserve
if [[ -d $BUNDLE/node_modules && ! -d tests/serve/node_modules ]]; then
  ln -s "$BUNDLE/node_modules" tests/serve/node_modules
fi
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
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
part ops 300 "$BUNDLE/bin/cuda_test" --gtest_filter='-Presets/CudaModelTest.*'
part model 300 "$BUNDLE/bin/cuda_test" --gtest_filter='Presets/CudaModelTest.*'
grep '^\[ cuda_model \]' "$LOGS/model.log" || true

# script NAME TIMEOUT CMD...: a test script (exit 0 = pass, 77 = skipped, else fail).
script() {
  local name=$1 limit=$2
  shift 2
  local t0 rc secs
  t0=$(date +%s.%N)
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  if [[ $rc -eq 0 ]]; then
    echo "$name: PASS (${secs} s) $(tail -1 "$LOGS/$name.log")"
  else
    echo "$name: FAIL (rc $rc, ${secs} s; $LOGS/$name.log)"
    tail -8 "$LOGS/$name.log"
    failed=1
  fi
}
script arrivals 300 tests/engine/run_arrivals_test.sh "$EPSERVE" "$WORK/arrivals" cuda
grep -E '^(KV cache|device|engine)' "$WORK/arrivals/cont.out" 2>/dev/null | sed 's/^/  /'
script arrivals_bf16 300 tests/engine/run_arrivals_test.sh "$EPSERVE" "$WORK/arrivals-bf16" cuda_bf16
if command -v node >/dev/null && [[ -d tests/serve/node_modules/openai ]]; then
  script serve_openai 120 tests/serve/openai_client_test.sh "$EPSERVE" "$WORK/serve" --device cuda
else
  echo "serve_openai: FAIL (node $(command -v node || echo missing), tests/serve/node_modules/openai $([[ -d tests/serve/node_modules/openai ]] && echo present || echo missing))"
  failed=1
fi
# Out of device memory is a clear error naming what did not fit, never a crash.
oom() {
  "$EPSERVE" make-model --preset tiny --out "$WORK/oom-model" >/dev/null || return 1
  local out rc=0
  out=$("$EPSERVE" generate --model "$WORK/oom-model" --prompt-ids 1,2 --max-tokens 2 --device cuda \
    --kv-memory 400G 2>&1) || rc=$?
  echo "$out" | tail -2
  [[ $rc -eq 1 ]] && grep -q "KV cache" <<<"$out" && grep -qi "out of memory" <<<"$out"
}
export -f oom
export EPSERVE WORK
script oom 60 bash -c oom
script serve_curl 120 tests/serve/gpu_curl_test.sh "$EPSERVE" "$WORK/serve-curl" --device cuda
# Decode at the family's real shapes (weights made in GPU memory; speed is the next issue's
# subject: this reports where it stands).
script bench_v2lite 240 "$EPSERVE" bench decode --device cuda --preset v2-lite --batch 1,32,128 --context 1024
sed 's/^/  /' "$LOGS/bench_v2lite.log" | tail -12
script bench_v3_l4 240 "$EPSERVE" bench decode --device cuda --preset v3 --layers 4 --batch 1,32,128 --context 1024
sed 's/^/  /' "$LOGS/bench_v3_l4.log" | tail -12
if [[ $failed -eq 0 ]]; then echo "verdict: PASS"; else echo "verdict: FAIL"; fi
exit $failed
