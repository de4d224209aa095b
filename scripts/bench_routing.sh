#!/usr/bin/env bash
# Routing benchmark: the same shared-prefix load (`epserve bench serve`) against two DP groups
# (two one-process engine services behind `epserve serve --engines`), once per routing policy,
# alternating cache_aware and round_robin ROUNDS times on fresh engines (cold caches each run).
# Prints each run and the mean ratios cache_aware / round_robin measured in this one run.
# usage: scripts/bench_routing.sh [ROUNDS] [bench serve flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
shift || true
EPSERVE=$PWD/${BUILD_DIR:-build}/tools/epserve
WORK=$(mktemp -d /tmp/epserve-bench-routing.XXXXXX)
source tests/serve/lib.sh
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
BENCH=(--num-requests 200 --input-len 24 --output-len 8 --shared-prefix-share 0.5
       --shared-prefix-len 400 --num-prefixes 20 "$@")
echo "load: bench serve ${BENCH[*]}"
for ((r = 1; r <= ROUNDS; ++r)); do
  for policy in cache_aware round_robin; do
    start_engines 2 "$WORK/model" "$WORK/engine-$policy-$r"
    start_server "$WORK/server-$policy-$r.log" --model "$WORK/model" --engines "$ENGINES" --policy $policy
    "$EPSERVE" bench serve --url "$BASE" "${BENCH[@]}" --json "$WORK/$policy-$r.json" >/dev/null 2>&1 ||
      { echo "bench serve failed ($policy, round $r)"; exit 1; }
    stop_server
    stop_engines
  done
done
/usr/bin/python3 - "$WORK" "$ROUNDS" <<'PYEOF'
import json, sys
work, rounds = sys.argv[1], int(sys.argv[2])
rows = {p: [json.load(open(f"{work}/{p}-{r}.json")) for r in range(1, rounds + 1)]
        for p in ("cache_aware", "round_robin")}
print(f"{'policy':12s} {'round':>5s} {'ok':>4s} {'failed':>6s} {'prefix hit':>10s} "
      f"{'TTFT mean':>9s} {'TTFT p50':>8s} {'TTFT p99':>8s} {'E2E mean':>8s} {'wall s':>6s}")
for p, runs in rows.items():
    for r, j in enumerate(runs, 1):
        print(f"{p:12s} {r:5d} {j['completed']:4d} {j['failed']:6d} {j['prefix_cache_share']:10.3f} "
              f"{j['ttft_ms']['mean']:9.0f} {j['ttft_ms']['median']:8.0f} {j['ttft_ms']['p99']:8.0f} "
              f"{j['e2e_ms']['mean']:8.0f} {j['duration_s']:6.2f}")
mean = lambda p, f: sum(f(j) for j in rows[p]) / len(rows[p])
for name, f in [("prefix hit rate", lambda j: j["prefix_cache_share"]),
                ("mean TTFT", lambda j: j["ttft_ms"]["mean"]),
                ("mean E2E", lambda j: j["e2e_ms"]["mean"]),
                ("wall time", lambda j: j["duration_s"])]:
    print(f"cache_aware / round_robin, {name}: {mean('cache_aware', f) / mean('round_robin', f):.3f}")
PYEOF
for f in "$WORK"/*.json; do /usr/bin/python3 -c "import json,sys; e=json.load(open(sys.argv[1]))[\"errors\"]; e and print(sys.argv[1], e[:3])" "$f"; done
rm -rf "$WORK"
