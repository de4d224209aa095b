#!/usr/bin/env bash
# The main job. Sets everything up (packages, build), then generates text on the embedded default
# model (the `tiny` preset, made on first use) across 4 expert-parallel MPI ranks laid out as
# 2 machines x 2 ranks (DP 4, TP 1; 5 prompts, so one DP group serves two), and prints the
# generated ids, throughput and the --stats table (traffic per MoE layer, tokens per rank and
# expert, time per kernel per rank). Extra arguments go to `epserve generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
"$BUILD_DIR/tools/epserve" make-model --preset tiny --out "$BUILD_DIR/models/tiny" >/dev/null
exec mpirun --oversubscribe --bind-to none -np 4 "$BUILD_DIR/tools/epserve" generate --model "$BUILD_DIR/models/tiny" \
  --ranks-per-node 2 --stats --max-tokens 16 \
  --prompt-ids 1,2,3,4,5 --prompt-ids 42 --prompt-ids 7,8,9 --prompt-ids 100,200,300,400 --prompt-ids 11 "$@"
