#!/usr/bin/env bash
# Sets everything up (packages, build) and runs the main job: generation on the
# embedded default model (the `tiny` preset, generated on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
exec "$BUILD_DIR/tools/epserve" generate --prompt-ids 1,2,3,4,5 --prompt-ids 42 --max-tokens 16 "$@"
