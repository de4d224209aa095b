#!/usr/bin/env bash
# serve.online_replacement: experts re-placed while `serve --np 4 --ranks-per-node 2` serves
# (docs/expert-parallelism.md, "Re-placing experts while serving"). Checks:
#   - with --replace-every 10, traffic makes the world switch placements (/metrics:
#     expert_replacements_total >= 1 within 60 s), bytes moved and the pause are counted, and
#     both copies-per-token gauges appear;
#   - greedy answers to the same prompts are the same tokens after the switch (while more
#     switches happen) as before any switch could have happened;
#   - with --replace-every 0 nothing switches until asked: POST /admin/replace-experts (401
#     without the API key, 200 with it), then the counter rises with the next traffic, even
#     though the world idled in between. Until the route exists (404 "no such route") that part
#     says it is skipped and asks the way the route does: SIGUSR2 to mpirun;
#   - both servers exit 0 on SIGTERM and leave no engine rank behind.
# Usage: online_replacement_test.sh EPSERVE WORKDIR
set -euo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
source "$HERE/../ep/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null
engines() { pgrep -f "epserve engine --model $WORK/model" || true; }
AUTH=()

# complete OUT PROMPT MAX_TOKENS: one greedy completion of token ids; its JSON in OUT.
complete() {
  local code
  code=$(curl -s --max-time 30 "${AUTH[@]}" -o "$1" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d "{\"prompt\": [$2], \"max_tokens\": $3, \"temperature\": 0, \"ignore_eos\": true, \"return_token_ids\": true}" \
    "$BASE/v1/completions")
  [[ $code == 200 ]] || { cat "$1"; echo; echo "completion of [$2]: HTTP $code"; return 1; }
}
# Four probes, run at once. Each routes 6 + 8 - 1 = 13 tokens: 52 in all, fewer than the 64 a
# gather needs to place (OnlinePlacerOptions::min_tokens), so no switch can happen among them
# before the first traffic.
PROBES=("3,14,15,92,65,35" "700,12,5,88,41,9" "2,7,18,28,18,28" "500,400,300,200,100,50")
probes() {
  local pids=() i
  for i in "${!PROBES[@]}"; do
    complete "$WORK/$1-$i.json" "${PROBES[$i]}" 8 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || fail "a probe failed"; done
}
# traffic ROUND: four other requests at once, 6 + 16 - 1 = 21 routed tokens each.
traffic() {
  local pids=() i
  for i in 0 1 2 3; do
    complete "$WORK/traffic.json.$i" "$((10 + 40 * i + $1 % 37)),$((600 + i)),$((1 + $1 % 50)),9,$((200 + i)),33" 16 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i" || fail "a request failed"; done
}
# drive_until SECONDS 'CONDITION': traffic rounds until CONDITION holds, at most SECONDS.
drive_until() {
  local deadline=$((SECONDS + $1)) round=0
  until eval "$2"; do
    ((SECONDS < deadline)) || return 1
    traffic $((round++))
    sleep 0.2  # /metrics reads the groups' counters
  done
}
replacements() { local n; n=$(metric epserve:expert_replacements_total); echo "${n:-0}"; }
positive() { [[ -n $1 ]] && /usr/bin/python3 -c "import sys; sys.exit(0 if float('$1') > 0 else 1)"; }

# 1. Re-placement every 10 steps. A gather places from every group's last --replace-window
# tokens and needs 64 in all: 4 groups x 32 would be the least; 256 keeps GRACE's input small.
start_server "$WORK/server.log" --model "$WORK/model" --np 4 --ranks-per-node 2 \
  --replace-every 10 --replace-window 256 --replace-slots 8
grep -q -- '--replace-every 10 --replace-window 256 --replace-slots 8' "$WORK/server.log" ||
  fail "the world was not handed the re-placement flags"
t0=$SECONDS
probes before
[[ $(replacements) == 0 ]] || fail "a switch before the first traffic ($(replacements)); the probes are not 'before'"
drive_until 60 '[[ $(replacements) -ge 1 ]]' ||
  { grep -a 're-placement' "$WORK/server.log" | tail -5 || true; fail "no re-placement within 60 s of traffic"; }
echo "first switch after $((SECONDS - t0)) s of traffic: $(grep -a -m1 '^re-placement 1 ' "$WORK/server.log")"
probes after
# The gauge since the last switch appears at the next gather.
drive_until 30 '[[ -n $(metric epserve:expert_cross_machine_copies_per_token) &&
                  -n $(metric epserve:expert_cross_machine_copies_per_token_before) ]]' ||
  fail "the copies-per-token gauges are not both in /metrics"
n=$(replacements)
bytes=$(metric epserve:expert_replacement_bytes_total)
pause=$(metric epserve:expert_replacement_pause_seconds_total)
positive "$bytes" || fail "expert_replacement_bytes_total is '$bytes' after $n switches"
positive "$pause" || fail "expert_replacement_pause_seconds_total is '$pause' after $n switches"
echo "$n switches: $bytes bytes, pause $pause s; cross-machine copies per token" \
  "$(metric epserve:expert_cross_machine_copies_per_token_before) before the last switch," \
  "$(metric epserve:expert_cross_machine_copies_per_token) since"
/usr/bin/python3 - "$WORK" "${#PROBES[@]}" <<'PY' || fail "greedy answers changed with the placement"
import json, sys
work, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    a = json.load(open(f"{work}/before-{i}.json"))["choices"][0]
    b = json.load(open(f"{work}/after-{i}.json"))["choices"][0]
    assert len(a["token_ids"]) == 8, a
    assert (a["token_ids"], a["text"]) == (b["token_ids"], b["text"]), (i, a["token_ids"], b["token_ids"])
print(f"{n} greedy probes: the same tokens before and after re-placement")
PY
stop_server
[[ -z $(engines) ]] || fail "engine ranks left after SIGTERM: $(engines)"

# 2. Only when asked (--replace-every 0), through the admin endpoint (which needs the API key).
start_server "$WORK/server0.log" --model "$WORK/model" --np 4 --ranks-per-node 2 \
  --replace-every 0 --replace-window 256 --api-key sekrit
AUTH=(-H 'Authorization: Bearer sekrit')
for r in 0 1 2; do traffic $r; done  # 252 tokens profiled: enough to place
sleep 0.3
[[ $(replacements) == 0 ]] || fail "--replace-every 0 switched unasked"
code=$(curl -s --max-time 10 -o "$WORK/admin.json" -w '%{http_code}' -X POST "$BASE/admin/replace-experts")
[[ $code == 401 ]] || { cat "$WORK/admin.json"; fail "POST /admin/replace-experts without the key: $code, want 401"; }
code=$(curl -s --max-time 10 "${AUTH[@]}" -o "$WORK/admin.json" -w '%{http_code}' -X POST "$BASE/admin/replace-experts")
if [[ $code == 404 ]] && grep -q 'no such route' "$WORK/admin.json"; then
  echo "serve.online_replacement: SKIPPED the admin endpoint part: POST /admin/replace-experts answers" \
    "404 \"no such route\" (not routed yet); asking the world with SIGUSR2 to mpirun instead, as the route would"
  mpirun_pid=$(pgrep -P "$SERVER_PID" -x mpirun) || fail "no mpirun under the server"
  kill -USR2 "$mpirun_pid"
else
  [[ $code == 200 ]] || { cat "$WORK/admin.json"; fail "POST /admin/replace-experts: $code, want 200"; }
  echo "POST /admin/replace-experts: 200 $(head -c 200 "$WORK/admin.json")"
fi
sleep 0.5  # the world idles: its idle polls must not use the request up
drive_until 30 '[[ $(replacements) -ge 1 ]]' ||
  { grep -a 're-placement\|Forwarding' "$WORK/server0.log" | tail -5 || true; fail "no re-placement within 30 s of asking"; }
[[ $(replacements) == 1 ]] || fail "asked once, $(replacements) switches"
echo "asked once: $(grep -a -m1 '^re-placement 1 ' "$WORK/server0.log")"
stop_server
[[ -z $(engines) ]] || fail "engine ranks left after SIGTERM: $(engines)"
echo "serve.online_replacement: ok"
