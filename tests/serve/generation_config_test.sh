#!/usr/bin/env bash
# serve.generation_config (issue 49): the model folder's generation_config.json gives the
# temperature / top_p / top_k of requests that set none (a request's own values win), the
# defaults in use are printed at start with where they came from, --generation-config none
# restores OpenAI's, --generation-config PATH reads another file, and a bad file stops the start
# with an error naming the file and the field.
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
PY=/usr/bin/python3
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
PROMPT="7,300,12,5,88"
N=8
"$EPSERVE" generate --model "$WORK/model" --prompt-ids "$PROMPT" --max-tokens $N --ignore-eos \
  --tokens-out "$WORK/greedy.json" >/dev/null
complete() {  # complete NAME EXTRA_JSON: a completion of PROMPT, its answer in $WORK/NAME.json
  local code
  code=$(curl -s --max-time 30 -H 'Content-Type: application/json' -o "$WORK/$1.json" -w '%{http_code}' \
    -d "{\"prompt\": [$PROMPT], \"max_tokens\": $N, \"ignore_eos\": true, \"return_token_ids\": true,
         \"seed\": 11 $2}" "$BASE/v1/completions")
  [[ $code == 200 ]] || fail "completion $1: HTTP $code: $(cat "$WORK/$1.json")"
}
# same A B: whether answer A's tokens equal B's (B may be "greedy": generate's greedy tokens).
same() {
  $PY - "$WORK" "$1" "$2" <<'PYEOF'
import json, sys
work, a, b = sys.argv[1:]
def tokens(name):
    j = json.load(open(f"{work}/{name}.json"))
    return j["tokens"][0] if "tokens" in j else j["choices"][0]["token_ids"]
sys.exit(0 if tokens(a) == tokens(b) else 1)
PYEOF
}

# The file says greedy: a request without temperature is greedy, one with temperature 1 samples.
echo '{"do_sample": true, "temperature": 0.0, "top_p": 0.95, "bos_token_id": 0}' >"$WORK/model/generation_config.json"
start_server "$WORK/auto.log" --model "$WORK/model"
grep -q "^epserve: sampling defaults (requests that set none): temperature 0, top_p 0.95, top_k 0 (temperature, top_p from $WORK/model/generation_config.json)$" \
  "$WORK/auto.log" || { cat "$WORK/auto.log"; fail "no sampling defaults line"; }
complete unset ""
same unset greedy || fail "a request without temperature did not take the file's 0: $(cat "$WORK/unset.json")"
complete null ', "temperature": null'
same null greedy || fail "temperature null did not take the file's 0"
complete own ', "temperature": 1.0'
if same own greedy; then fail "the request's own temperature 1.0 did not win"; fi
stop_server

# none: OpenAI's defaults (temperature 1): the same request now samples.
start_server "$WORK/none.log" --model "$WORK/model" --generation-config none
grep -q "^epserve: sampling defaults (requests that set none): temperature 1, top_p 1, top_k 0 (built-in: --generation-config none)$" \
  "$WORK/none.log" || { cat "$WORK/none.log"; fail "no built-in sampling defaults line"; }
complete none_unset ""
if same none_unset greedy; then fail "--generation-config none: still greedy"; fi
stop_server

# PATH: another file; a bad one is refused at start, naming the file and the field.
echo '{"temperature": 0, "top_k": 1}' >"$WORK/mine.json"
start_server "$WORK/path.log" --model "$WORK/model" --generation-config "$WORK/mine.json"
grep -q "temperature 0, top_p 1, top_k 1 (temperature, top_k from $WORK/mine.json)$" "$WORK/path.log" ||
  { cat "$WORK/path.log"; fail "--generation-config PATH not read"; }
complete path_unset ', "temperature": 1.0'
same path_unset greedy || fail "top_k 1 from the file: not the greedy tokens"
stop_server
echo '{"temperature": 0.6, "top_p": 1.5}' >"$WORK/model/generation_config.json"
rc=0
timeout 30 "$EPSERVE" serve --model "$WORK/model" --port 0 --kv-memory 64M --threads 1 >"$WORK/bad.log" 2>&1 || rc=$?
[[ $rc -eq 1 ]] || { cat "$WORK/bad.log"; fail "a bad generation_config.json: exit $rc, want 1"; }
grep -qF "$WORK/model/generation_config.json: field \"top_p\" must be a number in (0, 1], got 1.5" "$WORK/bad.log" ||
  { cat "$WORK/bad.log"; fail "a bad generation_config.json: no error naming it"; }
echo "serve.generation_config: ok"
