#!/usr/bin/env bash
# Sets everything up (packages, build) and runs every test through CTest, then the unit tests
# again under ASan + UBSan (scripts/sanitize.sh, a second build folder). Both run even if the
# first fails; the exit code is non-zero if either did. EPSERVE_SANITIZE=0 skips the second.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
rc=0
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 -j "$(nproc)") || rc=$?
if [[ "${EPSERVE_SANITIZE:-1}" != 0 ]]; then
  scripts/sanitize.sh || rc=$((rc == 0 ? 1 : rc))
fi
exit "$rc"
