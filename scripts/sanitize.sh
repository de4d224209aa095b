#!/usr/bin/env bash
# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (docs/testing.md,
# "Sanitizers"): configures build-asan/ with -DEPSERVE_SANITIZE=ON (GoogleTest binaries,
# src-level checks and fuzz replays; no epserve binary, no command-line tests), builds it and
# runs its CTests. Any sanitizer report fails the run. Packages come from scripts/setup.sh.
# Usage: scripts/sanitize.sh [ctest arguments, e.g. -R base]
set -euo pipefail
cd "$(dirname "$0")/.."
ASAN_BUILD_DIR=${ASAN_BUILD_DIR:-build-asan}
if [[ ! -f "$ASAN_BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$ASAN_BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEPSERVE_SANITIZE=ON
fi
start=$(date +%s)
cmake --build "$ASAN_BUILD_DIR" --parallel "$(nproc)"
echo "sanitize: built in $(($(date +%s) - start)) s"
# Leaks are errors too (LeakSanitizer runs at exit); halt on the first UBSan report with its stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/scripts/lsan.supp:print_suppressions=0}
cd "$ASAN_BUILD_DIR"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
