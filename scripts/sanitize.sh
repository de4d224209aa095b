#!/usr/bin/env bash
# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (docs/testing.md,
# "Sanitizers"): configures build-asan/ with -DEPSERVE_SANITIZE=ON (GoogleTest binaries,
# src-level checks and fuzz replays; no epserve binary, no command-line tests), builds it and
# runs its CTests. Any sanitizer report fails the run. Packages come from scripts/setup.sh.
# Usage: scripts/sanitize.sh [ctest arguments, e.g. -R base]
#        scripts/sanitize.sh --serve [TEST...]
# --serve (not part of the test command: ~15 min to build, minutes to run) also builds the
# epserve binary under the sanitizers and runs the serving tests (tests/serve/*_test.sh; default:
# those of the hardened HTTP layer and the self-healing world) against it, every process
# (servers, engine services, mpirun's ranks) writing its sanitizer reports to one folder; any
# report, or a failed test, fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
serve=0
if [[ ${1:-} == --serve ]]; then
  serve=1
  shift
fi
if [[ ! -f "$ASAN_BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$ASAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEPSERVE_SANITIZE=ON
fi
start=$(date +%s)
if [[ $serve == 1 ]]; then
  cmake --build "$ASAN_BUILD_DIR" --parallel "$(nproc)" --target epserve
else
  cmake --build "$ASAN_BUILD_DIR" --parallel "$(nproc)"
fi
echo "sanitize: built in $(($(date +%s) - start)) s"
# Leaks are errors too (LeakSanitizer runs at exit); halt on the first UBSan report with its stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}

if [[ $serve == 1 ]]; then
  tests=("$@")
  if [[ ${#tests[@]} == 0 ]]; then
    tests=(curl hostile disconnect slow_clients http tls engine_token failover world self_heal)
  fi
  work=$(mktemp -d /tmp/epserve-sanitize-serve.XXXXXX)
  reports=$work/reports
  mkdir -p "$reports"
  # log_path: every process, mpirun's ranks included, writes its reports to reports/<name>.<pid>.
  export ASAN_OPTIONS="$ASAN_OPTIONS:log_path=$reports/asan"
  export UBSAN_OPTIONS="$UBSAN_OPTIONS:log_path=$reports/ubsan"
  failed=()
  for t in "${tests[@]}"; do
    script=tests/serve/${t}_test.sh
    [[ -f $script ]] || { echo "sanitize: no test $script" >&2; exit 2; }
    t0=$(date +%s)
    if timeout 900 "$script" "$PWD/$ASAN_BUILD_DIR/tools/epserve" "$work/$t" >"$work/$t.log" 2>&1; then
      echo "sanitize: serve.$t passed in $(($(date +%s) - t0)) s"
    else
      echo "sanitize: serve.$t FAILED in $(($(date +%s) - t0)) s (log: $work/$t.log)"
      tail -n 20 "$work/$t.log"
      failed+=("$t")
    fi
  done
  if compgen -G "$reports/*" >/dev/null; then
    echo "sanitize: sanitizer reports in $reports:"
    for f in "$reports"/*; do
      echo "== $f"
      head -n 40 "$f"
    done
    exit 1
  fi
  [[ ${#failed[@]} == 0 ]] || { echo "sanitize: failed: ${failed[*]}"; exit 1; }
  echo "sanitize: ${#tests[@]} serving tests under ASan + UBSan, no report ($work)"
  exit 0
fi
cd "$ASAN_BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
