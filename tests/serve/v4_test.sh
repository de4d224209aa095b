#!/usr/bin/env bash
# serve.v4 / serve.v4.np2: DeepSeek-V4 (make-model --preset tiny-v4) served in one process, or
# with --np 2 by a two-rank expert-parallel engine world (two DP groups), and driven by the
# official openai client (v4_openai_test.mjs: chat whole = streamed, a forced tool call streamed).
# The checkpoint has no chat template, as DeepSeek-V4's: the server renders prompts with the
# built-in V4 encoding and reads DSML tool calls in V4's <｜DSML｜tool_calls> block; a scripted
# output (as encoding_dsv4.py writes an assistant turn: reasoning, </think>, content, calls)
# checks reasoning_content and the parsed calls through the client.
set -euo pipefail
EPSERVE=$1 WORK=$2
shift 2  # the rest: more `serve` flags (--np 2)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
[[ -d $HERE/node_modules/openai ]] || { echo "tests/serve/node_modules missing: run scripts/setup.sh"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny-v4 --dtype fp8 --seed 4 --out "$WORK/model" >/dev/null
cat >"$WORK/scripts.json" <<'JSON'
[{"when": "CALL_V4", "output": "Need the weather.</think>Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris \"centre\"</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"}]
JSON
start_server "$WORK/server.log" --model "$WORK/model" "$@" --served-model-name tiny-v4 \
  --scripted-outputs "$WORK/scripts.json"
grep -q 'built-in DeepSeek-V4 encoding' "$WORK/server.log" || { cat "$WORK/server.log"; fail "no V4 encoding"; }
grep -q 'tool calls: deepseek_v4, reasoning: deepseek-v3' "$WORK/server.log" || { cat "$WORK/server.log"; fail "formats"; }
timeout 60 node "$HERE/v4_openai_test.mjs" "$BASE" tiny-v4 || { cat "$WORK/server.log"; exit 1; }
stop_server 20
