#!/usr/bin/env bash
# serve.openai_client: runs openai_client_test.mjs (the official `openai` npm client, pinned by
# package-lock.json) against a server, with a hard timeout.
set -euo pipefail
EPSERVE=$1 WORK=$2
shift 2  # the rest: more `serve` flags (e.g. --np 2: a two-group deployment)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
[[ -d $HERE/node_modules/openai ]] || { echo "tests/serve/node_modules missing: run scripts/setup.sh"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
skip_without_gpu "$WORK/model" "$@"
start_server "$WORK/server.log" --model "$WORK/model" "$@" --served-model-name tiny --api-key k3y
timeout 30 node "$HERE/openai_client_test.mjs" "$BASE" tiny k3y
stop_server
