#!/usr/bin/env bash
# Expert parallelism over a real network on one host. Two "machines" are network namespaces,
# each joined to a bridge by a veth link shaped with tc (netem: 1 ms delay, 1 Gbit/s each way
# out of the machine), and Open MPI launches across them over TCP with `ip netns exec` as its
# rsh agent: ranks of one machine talk over its loopback, ranks of different machines through
# the two shaped links.
#   1) tokens and logits of the 4-rank EP run (2 machines x 2 ranks, TP 1) equal the
#      single-process run's (as run_ep_test.sh checks over shared memory), and so do those of the
#      same run with two micro-batches per MoE layer, with MTP, and with both;
#   2) one machine's link is taken down mid-run: the job must end within 60 s with a non-zero
#      exit code, an error naming the machine that went away (mpirun's daemon there) or what a
#      rank timed out waiting for, and no process left behind in either machine.
# Needs root, network namespaces, veth, a bridge and netem; exits 77 (CTest: skipped) with the
# reason otherwise. Everything it creates is named after its pid and removed on exit (netns_lib.sh).
# Usage: netns_test.sh EPSERVE WORKDIR
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"

source "$HERE/netns_lib.sh"
netns_up "$WORK" 1gbit 1ms
echo "machines: ${NS[0]} (${IP[0]}), ${NS[1]} (${IP[1]}); inter-machine links: $SHAPE"
NETRUN+=(--host "${IP[0]}:2,${IP[1]}:2" -np 4)

"$EPSERVE" make-model --preset tiny --dtype fp8 --seed 5 --out "$WORK/model" >/dev/null || exit 1
P=(--prompt-ids 10 --prompt-ids "$(seq -s, 60 66)" --prompt-ids "$(seq -s, 110 142)" --prompt-ids 160,161,162)

# 1) Equivalence over the network.
"$EPSERVE" generate --model "$WORK/model" "${P[@]}" --max-tokens 12 --ignore-eos --expert-input fp8 \
  --logits-out "$WORK/single.npy" --tokens-out "$WORK/single.json" >/dev/null || exit 1
start=$(date +%s)
timeout 120 "${NETRUN[@]}" "$EPSERVE" generate --model "$WORK/model" "${P[@]}" --max-tokens 12 --ignore-eos \
  --ranks-per-node 2 --stats --timeout 30 --logits-out "$WORK/ep.npy" --tokens-out "$WORK/ep.json" \
  >"$WORK/ep.out" 2>&1 || { echo "FAIL: the EP run over the namespace network failed"; tail -20 "$WORK/ep.out"; exit 1; }
echo "EP run over the network: $(($(date +%s) - start)) s"
grep -A4 "traffic per MoE layer" "$WORK/ep.out" | head -5
/usr/bin/python3 "$HERE/../reference/compare.py" --engine-logits "$WORK/ep.npy" --ref-logits "$WORK/single.npy" \
  --engine-tokens "$WORK/ep.json" --ref-tokens "$WORK/single.json" --tol 1e-4 || exit 1

# 1b) Micro-batching and MTP over the network: the plain run's tokens, logits within the same bound.
for variant in "microbatch:--overlap microbatch" "mtp:--mtp on" "mtp_microbatch:--mtp on --overlap microbatch"; do
  name=${variant%%:*}
  read -ra extra <<<"${variant#*:}"
  start=$(date +%s)
  timeout 120 "${NETRUN[@]}" "$EPSERVE" generate --model "$WORK/model" "${P[@]}" --max-tokens 12 --ignore-eos \
    --ranks-per-node 2 --timeout 30 --logits-out "$WORK/$name.npy" --tokens-out "$WORK/$name.json" "${extra[@]}" \
    >"$WORK/$name.out" 2>&1 || { echo "FAIL: the $name run over the namespace network failed"; tail -20 "$WORK/$name.out"; exit 1; }
  echo "$name run over the network: $(($(date +%s) - start)) s; $(grep -E '^(overlap|mtp):' "$WORK/$name.out" | paste -sd';')"
  /usr/bin/python3 "$HERE/../reference/compare.py" --engine-logits "$WORK/$name.npy" --ref-logits "$WORK/single.npy" \
    --engine-tokens "$WORK/$name.json" --ref-tokens "$WORK/single.json" --tol 1e-4 || exit 1
done

# 2) Machine 1's link goes down 3 s into a long run.
(sleep 3; ip link set "${HOSTV[1]}" down) &
run_failing_job 90 60 "machine 1's link went down" "${NETRUN[@]}" "$EPSERVE" generate --model "$WORK/model" \
  "${P[@]}" --max-tokens 4000 --ignore-eos --ranks-per-node 2 --timeout 5 || exit 1
wait
# Who reports it first: mpirun, when its control connection to machine 1's daemon fails
# (keepalive, about 4 s), naming that machine; or a rank of machine 0, whose wait for the
# exchange times out (5 s), naming what it waited for. The job must name machine 1 or a rank.
if grep -q "lost communication with a remote daemon" "$WORK/out"; then
  grep -q "on node ${IP[1]}" "$WORK/out" ||
    { echo "FAIL: mpirun lost a daemon but does not name machine 1 (${IP[1]})"; tail -20 "$WORK/out"; exit 1; }
  echo "mpirun: lost communication with the daemon on ${IP[1]} (machine 1)"
elif grep -Eq "rank [0-9]+: timed out after 5 s waiting for" "$WORK/out"; then
  grep -E "timed out after 5 s waiting for" "$WORK/out" | head -4
else
  echo "FAIL: neither mpirun nor a rank says what failed"; tail -20 "$WORK/out"; exit 1
fi
no_doubled_rank_prefix || exit 1
# Machine 1's daemon lost mpirun too; it must end its ranks and itself (bounded: 15 s).
for ns in "${NS[@]}"; do
  for ((i = 0; i < 30; i++)); do
    [[ -z $(ip netns pids "$ns") ]] && break
    sleep 0.5
  done
  left=$(ip netns pids "$ns" | wc -l)
  if [[ $left -ne 0 ]]; then
    echo "FAIL: $left processes left in $ns 15 s after the job ended:"
    ps -o pid,args -p "$(ip netns pids "$ns" | paste -sd,)"
    exit 1
  fi
done
echo ok
