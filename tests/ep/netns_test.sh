#!/usr/bin/env bash
# Expert parallelism over a real network on one host. Two "machines" are network namespaces,
# each joined to a bridge by a veth link shaped with tc (netem: 1 ms delay, 1 Gbit/s each way
# out of the machine), and Open MPI launches across them over TCP with `ip netns exec` as its
# rsh agent: ranks of one machine talk over its loopback, ranks of different machines through
# the two shaped links.
#   1) tokens and logits of the 4-rank EP run (2 machines x 2 ranks, TP 1) equal the
#      single-process run's (as run_ep_test.sh checks over shared memory);
#   2) one machine's link is taken down mid-run: the job must end within 60 s with a non-zero
#      exit code, an error naming the machine that went away (mpirun's daemon there) or what a
#      rank timed out waiting for, and no process left behind in either machine.
# Needs root, network namespaces, veth, a bridge and netem; exits 77 (CTest: skipped) with the
# reason otherwise. Everything it creates is named epserve-<pid> and removed on exit.
# Usage: netns_test.sh EPSERVE WORKDIR
set -uo pipefail
EPSERVE=$1 WORK=$2
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/mpi_env.sh"
rm -rf "$WORK" && mkdir -p "$WORK"

ID=$(($$ % 10000))
NS=(epns${ID}a epns${ID}b)     # machine 0, machine 1
HOSTV=(epv${ID}a epv${ID}b)    # bridge side of each machine's link
BR=epbr${ID}
NET=10.$((77 + ID % 100)).$((ID % 250)).0
IP=(${NET%.0}.11 ${NET%.0}.12)

cleanup() {
  for ns in "${NS[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$BR" 2>/dev/null
  return 0
}
trap cleanup EXIT
skip() { echo "SKIPPED: $1"; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null && command -v tc >/dev/null || skip "needs ip and tc (Debian package iproute2)"
ip link add "$BR" type bridge 2>/dev/null || skip "cannot create a bridge here (no CAP_NET_ADMIN?)"
ip addr add "${NET%.0}.1/24" dev "$BR" && ip link set "$BR" up || skip "cannot configure the bridge"
for m in 0 1; do
  ip netns add "${NS[m]}" 2>/dev/null || skip "cannot create network namespaces here"
  ip link add "${HOSTV[m]}" type veth peer name eth0 netns "${NS[m]}" 2>/dev/null || skip "cannot create veth links here"
  ip link set "${HOSTV[m]}" master "$BR" up
  ip netns exec "${NS[m]}" ip addr add "${IP[m]}/24" dev eth0
  ip netns exec "${NS[m]}" ip link set eth0 up
  ip netns exec "${NS[m]}" ip link set lo up
  # The inter-machine path: what leaves a machine gets 1 Gbit/s and, where the kernel has
  # netem, waits 1 ms; without netem a token bucket sets the rate alone.
  if ip netns exec "${NS[m]}" tc qdisc add dev eth0 root netem delay 1ms rate 1gbit 2>/dev/null; then
    SHAPE="netem: 1 ms delay, 1 Gbit/s"
  elif ip netns exec "${NS[m]}" tc qdisc add dev eth0 root tbf rate 1gbit burst 64kb latency 20ms 2>/dev/null; then
    SHAPE="tbf: 1 Gbit/s (this kernel has no netem, so no added delay)"
  else
    skip "tc can shape neither with netem nor with tbf here"
  fi
done
echo "machines: ${NS[0]} (${IP[0]}), ${NS[1]} (${IP[1]}); inter-machine links: $SHAPE"

# Open MPI's rsh agent: "host" IP[m] is namespace NS[m]; the command is one shell string.
cat >"$WORK/rsh" <<AGENT
#!/bin/sh
while [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case "\$host" in
  ${IP[0]}) ns=${NS[0]} ;;
  ${IP[1]}) ns=${NS[1]} ;;
  *) echo "rsh: unknown machine \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$WORK/rsh"
NETRUN=("${MPIRUN[@]}" --host "${IP[0]}:2,${IP[1]}:2" -np 4 --mca plm_rsh_agent "$WORK/rsh"
        --mca btl tcp,self --mca btl_tcp_if_include "$NET/24" --mca oob_tcp_if_include "$NET/24"
        # mpirun must notice a machine it can no longer reach (its daemon there cannot report
        # the ranks' exits): TCP keepalive on its control connections, 1 s idle, 3 probes 1 s apart.
        --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3
        # Two daemons on one host both share their hwloc topology through a shared-memory
        # segment; in Open MPI 4.1 that crashed one daemon now and then (a segfault in
        # hwloc_shmem_topology_write). The segment is an optimisation: off.
        --mca rtc ^hwloc)

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
