#!/usr/bin/env bash
# serve.load: 200 concurrent streaming requests, half of them sharing long prefixes, over two
# DP groups (two one-process engine services behind `serve --engines`; DEPLOY=world: a two-rank
# expert-parallel world, `serve --np 2`), once with cache_aware routing, once with round_robin.
# Each run: every request completes and its text and token ids equal the same prompt run alone
# (greedy; in both deployments, docs/kernels.md "Batch invariance");
# cache_aware must reach a higher prefix-cache hit rate than round_robin. Both runs' hit rates
# and mean TTFT are printed (TTFT is a timing: reported, not asserted).
set -euo pipefail
EPSERVE=$1 WORK=$2
N=${3:-200}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
[[ -d $HERE/node_modules/openai ]] || { echo "tests/serve/node_modules missing: run scripts/setup.sh"; exit 1; }
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
for policy in cache_aware round_robin; do
  if [[ ${DEPLOY:-engines} == world ]]; then
    start_server "$WORK/server-$policy.log" --model "$WORK/model" --np 2 --policy $policy
  else
    start_engines 2 "$WORK/model" "$WORK/engine-$policy"
    start_server "$WORK/server-$policy.log" --model "$WORK/model" --engines "$ENGINES" --policy $policy
  fi
  timeout 400 node "$HERE/load_test.mjs" "$BASE" model "$N" "$WORK/$policy.json"
  stop_server
  [[ ${DEPLOY:-engines} == world ]] || stop_engines
done
/usr/bin/python3 - "$WORK" "$N" <<'PYEOF'
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
r = {p: json.load(open(f"{work}/{p}.json")) for p in ("cache_aware", "round_robin")}
for p, x in r.items():
    assert x["equal_to_alone"] == n, (p, x)
    print(f"{p:12s} prefix hit rate {x['prefix_hit_rate']:.3f}  mean TTFT {x['mean_ttft_s']*1000:.0f} ms  "
          f"wall {x['seconds']:.1f} s  {' '.join(l.split('}')[0].split(',')[-1] + '=' + l.split()[-1] for l in x['prompt_tokens_per_group'])}")
assert r["cache_aware"]["prefix_hit_rate"] > r["round_robin"]["prefix_hit_rate"], "cache_aware did not beat round_robin on prefix hits"
print(f"serve.load: equal to their alone run: {r['cache_aware']['equal_to_alone']}/{n} (cache_aware), "
      f"{r['round_robin']['equal_to_alone']}/{n} (round_robin); cache_aware hit rate "
      f"{r['cache_aware']['prefix_hit_rate']:.3f} > round_robin {r['round_robin']['prefix_hit_rate']:.3f}")
PYEOF
