#!/usr/bin/env bash
# serve.greedy_matches_generate: greedy completions of token-id prompts through the server,
# three at once (continuous batching), give exactly the tokens `epserve generate` gives.
set -euo pipefail
EPSERVE=$1 WORK=$2
shift 2  # the rest: more `serve` flags (e.g. --np 2: a two-group deployment)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
PROMPTS=("1,2,3" "7,300,12,5,88,41,9" "500")
N=10
"$EPSERVE" generate --model "$WORK/model" --max-tokens $N --ignore-eos --tokens-out "$WORK/generate.json" \
  --prompt-ids "${PROMPTS[0]}" --prompt-ids "${PROMPTS[1]}" --prompt-ids "${PROMPTS[2]}" >/dev/null
start_server "$WORK/server.log" --model "$WORK/model" "$@"
pids=()
for i in 0 1 2; do
  curl -s --max-time 30 -H 'Content-Type: application/json' -o "$WORK/server-$i.json" \
    -d "{\"prompt\": [${PROMPTS[$i]}], \"max_tokens\": $N, \"temperature\": 0, \"ignore_eos\": true,
         \"return_token_ids\": true, \"logprobs\": 2}" "$BASE/v1/completions" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a request failed"; done
if [[ " $* " == *" --mtp on "* ]]; then
  # Speculative decoding: the same tokens (checked below), and drafts counted in /metrics.
  drafts=$(metric epserve:spec_decode_num_draft_tokens_total)
  accepted=$(metric epserve:spec_decode_num_accepted_tokens_total)
  echo "mtp: $accepted of $drafts drafts accepted"
  [[ -n $drafts && $drafts -gt 0 && -n $accepted && $accepted -le $drafts ]] ||
    fail "MTP counters in /metrics: drafts '$drafts', accepted '$accepted'"
fi
/usr/bin/python3 - "$WORK" $N <<'PYEOF' || fail "server tokens differ from generate"
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
want = json.load(open(f"{work}/generate.json"))["tokens"]
for i in range(3):
    r = json.load(open(f"{work}/server-{i}.json"))
    c = r["choices"][0]
    assert c["token_ids"] == want[i], (i, c["token_ids"], want[i])
    assert len(c["logprobs"]["token_logprobs"]) == n and len(c["logprobs"]["top_logprobs"][0]) >= 1, c["logprobs"]
    # Greedy: the sampled token is the most likely one.
    assert abs(c["logprobs"]["token_logprobs"][0] - max(c["logprobs"]["top_logprobs"][0].values())) < 1e-5
    assert r["usage"]["completion_tokens"] == n
print("server == generate for", len(want), "prompts")
PYEOF
stop_server
echo "serve.greedy_matches_generate: ok"
