#!/usr/bin/env bash
# Micro-batching over a real network, measured and predicted (issue 13; docs/expert-parallelism.md,
# "Overlap"). Two "machines" (network namespaces, one EP rank each) joined by links shaped to
# --rate (tests/ep/netns_lib.sh); `epserve bench moe-layer --overlap none,dispatch,microbatch`
# times decode passes of the bench model across them, and `epserve plan layer` predicts the same
# MoE layer for the same deployment (EP2, one rank per machine), link speed and this machine's
# calibrated kernels (scripts/calibrate_cpu.sh). Prints both per batch and overlap mode, and both crossovers.
#
# Usage: scripts/overlap_bench.sh [--epserve BIN] [--out DIR] [--model DIR] [--rate 200mbit]
#          [--latency-us 60] [--batches 1,2,4,8,16,32,64] [--repeats 5] [--kv-len 256]
#          [--skip-calibration]
#   --model: an FP8 bench checkpoint (default: DIR/bench, made with make-model if absent)
#   --latency-us: the one-way link latency given to the planner (veth + TCP + MPI on this host;
#     netem, where the kernel has it, adds nothing here: the links are shaped by rate only)
#   --skip-calibration: reuse DIR/cpu.json and DIR/cpu-efficiency.json
# Needs root (namespaces); writes DIR/measured.json, DIR/predicted.json, DIR/table.txt.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=$root/build/tools/epserve
out=/tmp/epserve-overlap-bench
model=""
rate=200mbit
latency_us=60
batches=1,2,4,8,16,32,64
repeats=5
kv_len=256
skip_cal=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --epserve) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --latency-us) latency_us=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --kv-len) kv_len=$2; shift 2 ;;
    --skip-calibration) skip_cal=1; shift ;;
    *) sed -n 9,16p "$0" >&2; exit 2 ;;
  esac
done
[[ -x $bin ]] || { echo "error: no epserve binary at $bin (build first, or pass --epserve)" >&2; exit 1; }
mkdir -p "$out"
py=/usr/bin/python3
if [[ -z $model ]]; then
  model=$out/bench
  [[ -f $model/config.json ]] || "$bin" make-model --preset bench --dtype fp8 --out "$model" >&2
fi

if [[ $skip_cal == 0 ]]; then
  echo "== calibrate this machine's kernels" >&2
  "$root/scripts/calibrate_cpu.sh" "$bin" "$out"
fi

echo "== measure over two namespaces, links shaped to $rate" >&2
source "$root/tests/ep/mpi_env.sh"
source "$root/tests/ep/netns_lib.sh"
netns_up "$out" "$rate" 0ms
echo "links: $SHAPE" >&2
# Open MPI's TCP defaults (64 KB eager limit, 128 KB fragments, the OS's socket buffers) make a
# large message wait for both sides' progress calls at every fragment; raised, a layer's exchange
# is one message that the kernel moves through the socket buffers while the ranks compute.
TCP_MCA=(--mca btl_tcp_eager_limit 4194304 --mca btl_tcp_max_send_size 4194304
         --mca btl_tcp_sndbuf 8388608 --mca btl_tcp_rcvbuf 8388608)
timeout 1800 "${NETRUN[@]}" "${TCP_MCA[@]}" --host "${IP[0]}:1,${IP[1]}:1" -np 2 "$bin" bench moe-layer --model "$model" \
  --overlap none,dispatch,microbatch --batches "$batches" --repeats "$repeats" --kv-len "$kv_len" \
  --ranks-per-node 1 --threads 1 --timeout 300 --json >"$out/measured.json"
netns_down

echo "== predict" >&2
# The catalog entry with this deployment's links: the shaped rate across machines.
"$py" - "$out" "$rate" "$latency_us" <<'PY'
import json, re, sys
out, rate, lat = sys.argv[1], sys.argv[2], float(sys.argv[3])
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", rate)
gbs = float(m.group(1)) * {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0}[m.group(2)] / 8
cat = json.load(open(f"{out}/cpu.json"))
e = cat["gpus"][0]
e.update(infiniband_gbs=gbs, infiniband_latency_us=lat, gpus_per_machine=1)
cat["_comment"] += f"; links: {rate} ({gbs} GB/s), {lat} us, one rank per machine"
json.dump(cat, open(f"{out}/cpu-net.json", "w"), indent=2)
PY
pred="{}"
for b in ${batches//,/ }; do
  for mode in none dispatch-overlap micro-batch; do
    [[ $mode == micro-batch && $b -lt 2 ]] && continue
    "$bin" plan layer --hardware "$out/cpu-net.json" --gpu cpu --efficiency "$out/cpu-efficiency.json" \
      --model "$model/config.json" --ep 2 --tp 1 --gpus-per-machine 1 --batch "$b" --kv-len "$kv_len" \
      --query-len 1 --kv-element-bytes 4 --overlap "$mode" --exchange epserve --ignore-memory --json >"$out/plan-$mode-b$b.json"
  done
done

"$py" - "$out" "$batches" "$rate" <<'PY' | tee "$out/table.txt"
import json, sys
out, batches, rate = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], sys.argv[3]
meas = json.load(open(f"{out}/measured.json"))
m = {(r["batch"], r["overlap"]): r for r in meas["rows"]}
names = {"none": "none", "dispatch": "dispatch-overlap", "microbatch": "micro-batch"}
def plan(b, mode):
    try:
        return json.load(open(f"{out}/plan-{names[mode]}-b{b}.json"))["step"]["moe_layer"]["total_us"] / 1e3
    except FileNotFoundError:
        return None
print(f"EP2 over two namespaces ({rate} links), bench model, KV {meas['kv_len']}; ms per MoE layer")
print(f"| batch | measured none | dispatch | microbatch | micro/dispatch | planned none | dispatch | microbatch | micro/dispatch |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
rows, cross = {}, {"measured": None, "planned": None}
for b in batches:
    mv = [m[(b, k)]["moe_layer_ms"] for k in ("none", "dispatch", "microbatch")]
    pv = [plan(b, k) for k in ("none", "dispatch", "microbatch")]
    mr = mv[2] / mv[1]
    pr = pv[2] / pv[1] if pv[2] is not None else None
    f = lambda v: "–" if v is None else f"{v:.3f}"
    print(f"| {b} | {mv[0]:.3f} | {mv[1]:.3f} | {mv[2]:.3f} | {mr:.2f} | {f(pv[0])} | {f(pv[1])} | {f(pv[2])} | {'–' if pr is None else f'{pr:.2f}'} |")
    rows[b] = (mr, pr)
# Crossover: the smallest batch from which micro-batching wins at every larger batch.
for key, i in (("measured", 0), ("planned", 1)):
    c = None
    for b in batches:
        r = rows[b][i]
        if r is None: continue
        if r < 1 and c is None: c = b
        if r >= 1: c = None
    cross[key] = c
print(f"crossover (micro-batching wins from this batch on): measured {cross['measured']}, planned {cross['planned']}")
PY
