#!/usr/bin/env bash
# Fuzzes the input parsers with libFuzzer (fuzz/, docs/testing.md "Fuzzing").
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 60 s, every target)
# Configures and builds build-fuzz/ with clang and -fsanitize=fuzzer,address,undefined, replays
# each target's saved findings (fuzz/regressions/<name>/), then fuzzes it for SECONDS_PER_TARGET
# on a scratch corpus in build-fuzz/corpus/<name>/ (seeded from fuzz/corpus/<name>/ and kept
# between runs; the repository's corpus is never written). Prints executions, coverage and the
# outcome per target; exits 1 if any target found something (the input is saved under
# build-fuzz/findings/<name>/; fix the parser and keep the input in fuzz/regressions/<name>/).
# Environment: EPSERVE_FUZZ_BUILD (build folder), EPSERVE_FUZZ_JOBS (ninja -j, default nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${EPSERVE_FUZZ_BUILD:-$root/build-fuzz}
seconds=${1:-60}
shift || true
all_targets=(safetensors config trace placement planner tokenizer openai_request chat_request http grammar)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=("${all_targets[@]}"); fi
for t in "${targets[@]}"; do
  if [ ! -f "$root/fuzz/${t}_fuzz.cc" ]; then
    echo "fuzz.sh: no target '$t' (have: ${all_targets[*]})" >&2
    exit 2
  fi
done

# Seconds one input may take before libFuzzer calls it a hang. grammar: an unanchored pattern of
# a few hundred positions makes ~1,000-stack states, 96 mask walks of which take 0.25 s in the
# release build and over 10 s under ASan + coverage at -O1 (its first "timeout" was that).
unit_timeout() {
  case $1 in
    grammar) echo 60 ;;
    *) echo 10 ;;
  esac
}

# The largest input worth mutating per target: the biggest seed with room to grow.
max_len() {
  case $1 in
    planner | tokenizer | placement) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

if [ ! -f "$build/build.ninja" ]; then
  sanitize="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
  CC=clang CXX=clang++ cmake -G Ninja -S "$root" -B "$build" -DEPSERVE_FUZZ=ON \
    -DEPSERVE_FUZZ_REPLAY=OFF -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O1" \
    -DCMAKE_CXX_FLAGS="$sanitize" -DCMAKE_C_FLAGS="$sanitize"
fi
ninja -C "$build" -j "${EPSERVE_FUZZ_JOBS:-$(nproc)}" "${targets[@]/%/_fuzz}"

failed=()
summary=()
for t in "${targets[@]}"; do
  exe="$build/fuzz/${t}_fuzz"
  corpus="$build/corpus/$t"
  findings="$build/findings/$t"
  log="$build/logs/$t.log"
  mkdir -p "$corpus" "$findings" "$build/logs"
  cp -n "$root/fuzz/corpus/$t"/* "$corpus"/ 2>/dev/null || true
  regressions=()
  if compgen -G "$root/fuzz/regressions/$t/*" >/dev/null; then
    regressions=("$root/fuzz/regressions/$t"/*)
  fi
  echo "== $t: ${seconds} s"
  status=0
  # Saved findings first, one by one (a crash here is a regression, not a new finding).
  if [ ${#regressions[@]} -gt 0 ] && ! "$exe" -rss_limit_mb=2048 "${regressions[@]}" >"$log" 2>&1; then
    status=1
  fi
  if [ $status -eq 0 ]; then
    # The saved findings seed the run too; libFuzzer adds new inputs to the first folder only.
    "$exe" "$corpus" "$root/fuzz/regressions/$t" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
      -timeout="$(unit_timeout "$t")" -print_final_stats=1 -artifact_prefix="$findings/" >>"$log" 2>&1 || status=$?
  fi
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1 || true)
  last_line=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -n 1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  ran=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' <<<"${done_line:-$last_line}" | tail -n 1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' <<<"${done_line:-$last_line}" | tail -n 1 | cut -d' ' -f2)
  corp=$(grep -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' <<<"${done_line:-$last_line}" | tail -n 1 | cut -d' ' -f2)
  if [ $status -eq 0 ]; then
    outcome="no finding"
  else
    outcome="FINDING (exit $status): $(grep -m1 -E 'ERROR: |runtime error|==[0-9]+==|Test unit written' "$log" || true)"
    failed+=("$t")
  fi
  line=$(printf '%-15s %6s s  execs %-10s cov %-6s ft %-6s corpus %-10s %s' "$t" "${ran:-?}" \
    "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$outcome")
  echo "$line"
  summary+=("$line")
  if [ $status -ne 0 ]; then
    grep -E 'SUMMARY|Test unit written|artifact_prefix' "$log" || true
    echo "   log: $log"
  fi
done

echo "== summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "findings in: ${failed[*]} (inputs under $build/findings/)" >&2
  exit 1
fi
