#!/usr/bin/env bash
# The engine's routing trace -> `epserve place --strategy grace` -> the EP runtime with that
# placement: the generated tokens equal the single-process (contiguous-free) run, and the
# traffic --stats reports per MoE layer (token copies kept on the rank, sent within the machine,
# sent across machines) equals what `place evaluate` predicts for the same tokens.
# Usage: placement_stats_test.sh EPSERVE WORKDIR
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$EPSERVE" make-model --preset tiny --seed 9 --out model >/dev/null
P=(--prompt-ids 17 --prompt-ids 1,2,3,4,5,6,7 --prompt-ids "$(seq -s, 200 232)" --prompt-ids 5,6,7,8)
"$EPSERVE" generate --model model "${P[@]}" --max-tokens 12 --ignore-eos --expert-input fp8 --trace-out run.trace \
  --tokens-out single.json >/dev/null
# 2 machines x 2 ranks, and 4 machines x 1 rank, where topology-aware routing sends a token's
# experts to as few machines as their copies allow (the choice for one expert depends on the
# others), which the engine and `place evaluate` must make alike.
for topo in "2 2" "4 1"; do
  set -- $topo
  NODES=$1 RPN=$2
  echo "== $NODES machines x $RPN ranks"
  "$EPSERVE" place --trace run.trace --nodes "$NODES" --ranks-per-node "$RPN" --strategy grace --out placement.json
  "$EPSERVE" place evaluate --placement placement.json --trace run.trace --json >predicted.json
  "${MPIRUN[@]}" -np 4 "$EPSERVE" generate --model model "${P[@]}" --max-tokens 12 --ignore-eos --ranks-per-node "$RPN" \
    --placement placement.json --stats --tokens-out ep.json >ep.out
  /usr/bin/python3 - <<'PY'
import json, sys
single, ep = json.load(open("single.json")), json.load(open("ep.json"))
if single != ep:
    sys.exit("FAIL: tokens differ between the single-process run and the placed EP run")
placement = json.load(open("placement.json"))
extra = sum(len(c) - 1 for layer in placement["layers"] for c in layer["copies"])
print(f"placement: {extra} extra copies")
pred = {l["layer"]: (l["local"], l["intra_machine"], l["cross_machine"]) for l in json.load(open("predicted.json"))["layers"]}
seen = {}
lines = open("ep.out").read().split("traffic per MoE layer")[1].splitlines()[2:]
for line in lines:
    f = line.split()
    if not f or f[0] == "total":
        break
    seen[int(f[0])] = (int(f[1]), int(f[2]), int(f[3]))
print("layer: predicted (local, intra, cross) vs --stats")
for layer in sorted(pred):
    print(f"  {layer}: {pred[layer]} vs {seen.get(layer)}")
if pred != seen:
    sys.exit("FAIL: --stats traffic differs from place evaluate's prediction")
print("ok")
PY
done
