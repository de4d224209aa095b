#!/usr/bin/env bash
# serve.v4 / serve.v4.np2: DeepSeek-V4 (make-model --preset tiny-v4) served in one process, or
# with --np 2 by a two-rank expert-parallel engine world (two DP groups), and driven by the
# official openai client (v4_openai_test.mjs: chat whole = streamed, a forced tool call streamed).
# The chat template and tool-call format are the tiny preset's (V3's): DeepSeek-V4's own
# encoding is not implemented yet.
set -euo pipefail
EPSERVE=$1 WORK=$2
shift 2  # the rest: more `serve` flags (--np 2)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
[[ -d $HERE/node_modules/openai ]] || { echo "tests/serve/node_modules missing: run scripts/setup.sh"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny-v4 --dtype fp8 --seed 4 --out "$WORK/model" >/dev/null
start_server "$WORK/server.log" --model "$WORK/model" "$@" --served-model-name tiny-v4
timeout 60 node "$HERE/v4_openai_test.mjs" "$BASE" tiny-v4 || { cat "$WORK/server.log"; exit 1; }
stop_server 20
