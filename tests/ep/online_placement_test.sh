#!/usr/bin/env bash
# Online re-placement (docs/expert-parallelism.md, "Re-placing experts while serving") under
# mpirun: 4 ranks on 2 emulated machines replay arrivals whose routing changes halfway (8
# prompts over token ids 10-59 at step 0, then 30 prompts over ids 600-649 from step 20, one
# every 2 steps; the tiny model's gate routes the two vocabularies to different experts).
# `generate --replace-every 45` re-places from the recent tokens while they run. Checked:
#   - tokens and logits are the same bits as a run without re-placement, every request
#     complete, and the world ran as many steps as without (no step lost);
#   - one switch happened, and after it the measured cross-machine copies per token are within
#     10% of a run of the second half alone under an offline GRACE placement made from that
#     half's own trace (`generate --trace-out` + `epserve place`);
#   - the report gives the pause and bytes moved.
# Usage: online_placement_test.sh EPSERVE WORKDIR
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK"
"$EPSERVE" make-model --preset tiny --seed 9 --out model >/dev/null
/usr/bin/python3 - <<'PY'
import json, random
def prompt(seed, lo, hi, n=48):
    r = random.Random(seed)
    return [r.randrange(lo, hi) for _ in range(n)]
with open("arrivals.jsonl", "w") as both, open("second_half.jsonl", "w") as second:
    for i in range(8):
        both.write(json.dumps({"step": 0, "prompt_ids": prompt(i, 10, 60), "max_tokens": 8, "ignore_eos": True}) + "\n")
    for i in range(30):
        r = {"step": 20 + 2 * i, "prompt_ids": prompt(100 + i, 600, 650), "max_tokens": 8, "ignore_eos": True}
        both.write(json.dumps(r) + "\n")
        second.write(json.dumps(dict(r, step=2 * i)) + "\n")
PY
EP=("${MPIRUN[@]}" -np 4 "$EPSERVE" generate --model model --ranks-per-node 2 --timeout 120)
# The offline placement: the second half's routing (one process, expert inputs rounded as the
# dispatch does, so its routing is the EP run's), placed with the defaults.
"$EPSERVE" generate --model model --arrivals second_half.jsonl --expert-input fp8 --trace-out second.trace >/dev/null
"$EPSERVE" place --trace second.trace --nodes 2 --ranks-per-node 2 --out offline.json | tail -2
"${EP[@]}" --arrivals arrivals.jsonl --tokens-out plain.json --logits-out plain.npy >/dev/null
"${EP[@]}" --arrivals arrivals.jsonl --replace-every 0 >idle.out  # placer on, never asked
"${EP[@]}" --arrivals arrivals.jsonl --replace-every 45 --replace-window 128 \
  --tokens-out online.json --logits-out online.npy >online.out 2>online.err
"${EP[@]}" --arrivals second_half.jsonl --placement offline.json --replace-every 0 >offline.out
echo "== online run"; sed -n '/online re-placement/,$p' online.out; cat online.err
cmp plain.npy online.npy || { echo "FAIL: logits differ from the run without re-placement"; exit 1; }
/usr/bin/python3 - <<'PY'
import json, re, sys
plain, online = json.load(open("plain.json")), json.load(open("online.json"))
if plain["tokens"] != online["tokens"]:
    sys.exit("FAIL: tokens differ from the run without re-placement")
if any(len(t) != 8 for t in online["tokens"]) or set(online["finish"]) != {"length"}:
    sys.exit(f"FAIL: not every request completed: {online['finish']}")
def report(name):
    text = open(name).read()
    m = re.search(r"online re-placement: (\d+) switch(?:es)? in (\d+) steps", text)
    c = re.search(r"cross-machine copies per token since the (?:start|last switch): ([\d.]+) over (\d+) tokens", text)
    return int(m.group(1)), int(m.group(2)), float(c.group(1)), int(c.group(2)), text
switches, steps, after, after_tokens, text = report("online.out")
_, idle_steps, stale, _, _ = report("idle.out")
_, _, offline, offline_tokens, _ = report("offline.out")
row = re.search(r"^\s+1\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", text, re.M)
print(f"cross-machine copies per token: no re-placement {stale:.3f} (whole run), online after the switch "
      f"{after:.3f} ({after_tokens} tokens), offline placement of the second half {offline:.3f} ({offline_tokens} tokens)")
if switches != 1 or row is None:
    sys.exit(f"FAIL: want one switch, the report says {switches}")
print(f"switch before step {row.group(1)}: {row.group(3)} experts loaded ({row.group(5)} MB), pause {row.group(6)} ms")
if steps != idle_steps:
    sys.exit(f"FAIL: {steps} steps with re-placement, {idle_steps} without")
if after_tokens < 300:
    sys.exit(f"FAIL: only {after_tokens} tokens after the switch")
if after > 1.10 * offline:
    sys.exit(f"FAIL: {after:.3f} copies per token after the switch, more than 10% above offline {offline:.3f}")
print("ok")
PY
