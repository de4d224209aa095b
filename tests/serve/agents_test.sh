#!/usr/bin/env bash
# serve.agents: tool calls, reasoning, structured outputs and the sampling parameters through
# the clients agents use (agents_client_test.mjs: openai, LangChain, the Vercel AI SDK), against
# the tiny model with scripted tool-call outputs (agents_scripts.json); then DeepSeek-V3.1's
# format and tests/grammar/schemas.json's 50 schemas (agents_v31_test.mjs), with hard timeouts.
set -euo pipefail
EPSERVE=$1 WORK=$2
shift 2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
for m in openai @langchain/openai ai @ai-sdk/openai @ai-sdk/openai-compatible ajv zod; do
  [[ -d $HERE/node_modules/$m ]] || { echo "tests/serve/node_modules/$m missing: run scripts/setup.sh"; exit 1; }
done
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
# DEPLOY=engines: the engine runs as an `epserve engine` service behind --engines, so every
# request's constraint (grammar, script, banned tokens) crosses gRPC.
DEPLOY_ARGS=()
if [[ ${DEPLOY:-} == engines ]]; then
  start_engines 1 "$WORK/model" "$WORK/engine"
  DEPLOY_ARGS=(--engines "$ENGINES")
fi
start_server "$WORK/server.log" --model "$WORK/model" --served-model-name tiny --api-key k3y \
  --reasoning-parser deepseek-v3 --scripted-outputs "$HERE/agents_scripts.json" "${DEPLOY_ARGS[@]}" "$@"
grep -q 'tool calls: deepseek_v3' "$WORK/server.log" || { cat "$WORK/server.log"; echo "FAIL: the tool-call format was not read from the template"; exit 1; }
timeout 240 node "$HERE/agents_client_test.mjs" "$BASE" tiny k3y || { tail -20 "$WORK/server.log"; exit 1; }
stop_server
# DeepSeek-V3.1's format (chosen by flag), and 50 schemas sampled under their grammars.
start_server "$WORK/server31.log" --model "$WORK/model" --served-model-name tiny --api-key k3y \
  --tool-call-format deepseek_v31 --scripted-outputs "$HERE/agents_scripts.json" "${DEPLOY_ARGS[@]}" "$@"
timeout 240 node "$HERE/agents_v31_test.mjs" "$BASE" tiny k3y "$HERE/../grammar/schemas.json" ||
  { tail -20 "$WORK/server31.log"; exit 1; }
stop_server
[[ ${DEPLOY:-} != engines ]] || stop_engines
