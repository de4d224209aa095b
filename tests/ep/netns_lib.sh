# Two "machines" on one host for tests and benchmarks (sourced): network namespaces, each
# joined to a bridge by a veth link whose egress is shaped with tc, and an Open MPI launch line
# across them over TCP with `ip netns exec` as its rsh agent. Ranks of one machine talk over its
# loopback, ranks of different machines through the two shaped links.
#   netns_up WORKDIR RATE DELAY   e.g. netns_up "$WORK" 1gbit 1ms; sets NS, HOSTV, IP, SHAPE,
#                                 NETRUN (mpirun ... up to the program); exits 77 with the reason
#                                 when this host cannot (not root, no namespaces, veth, bridge)
#   netns_down                    removes everything (also on EXIT, via the trap netns_up sets)
# Needs MPIRUN from mpi_env.sh. Everything created is named after this shell's pid.
NETNS_ID=$(($$ % 10000))
NS=(epns${NETNS_ID}a epns${NETNS_ID}b)  # machine 0, machine 1
HOSTV=(epv${NETNS_ID}a epv${NETNS_ID}b) # bridge side of each machine's link
NETNS_BR=epbr${NETNS_ID}
NETNS_NET=10.$((77 + NETNS_ID % 100)).$((NETNS_ID % 250)).0
IP=(${NETNS_NET%.0}.11 ${NETNS_NET%.0}.12)

netns_down() {
  for ns in "${NS[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$NETNS_BR" 2>/dev/null
  return 0
}

netns_skip() { echo "SKIPPED: $1"; exit 77; }

netns_up() {
  local work=$1 rate=$2 delay=$3
  trap netns_down EXIT
  [[ $(id -u) -eq 0 ]] || netns_skip "needs root to create network namespaces"
  command -v ip >/dev/null && command -v tc >/dev/null || netns_skip "needs ip and tc (Debian package iproute2)"
  ip link add "$NETNS_BR" type bridge 2>/dev/null || netns_skip "cannot create a bridge here (no CAP_NET_ADMIN?)"
  ip addr add "${NETNS_NET%.0}.1/24" dev "$NETNS_BR" && ip link set "$NETNS_BR" up || netns_skip "cannot configure the bridge"
  for m in 0 1; do
    ip netns add "${NS[m]}" 2>/dev/null || netns_skip "cannot create network namespaces here"
    ip link add "${HOSTV[m]}" type veth peer name eth0 netns "${NS[m]}" 2>/dev/null || netns_skip "cannot create veth links here"
    ip link set "${HOSTV[m]}" master "$NETNS_BR" up
    ip netns exec "${NS[m]}" ip addr add "${IP[m]}/24" dev eth0
    ip netns exec "${NS[m]}" ip link set eth0 up
    ip netns exec "${NS[m]}" ip link set lo up
    # The inter-machine path: what leaves a machine gets `rate` and, where the kernel has
    # netem, waits `delay`; without netem a token bucket sets the rate alone.
    if ip netns exec "${NS[m]}" tc qdisc add dev eth0 root netem delay "$delay" rate "$rate" 2>/dev/null; then
      SHAPE="netem: $delay delay, $rate"
    elif ip netns exec "${NS[m]}" tc qdisc add dev eth0 root tbf rate "$rate" burst 64kb latency 20ms 2>/dev/null; then
      SHAPE="tbf: $rate (this kernel has no netem, so no added delay)"
    else
      netns_skip "tc can shape neither with netem nor with tbf here"
    fi
  done
  # Open MPI's rsh agent: "host" IP[m] is namespace NS[m]; the command is one shell string.
  cat >"$work/rsh" <<AGENT
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
  chmod +x "$work/rsh"
  NETRUN=("${MPIRUN[@]}" --mca plm_rsh_agent "$work/rsh"
          --mca btl tcp,self --mca btl_tcp_if_include "$NETNS_NET/24" --mca oob_tcp_if_include "$NETNS_NET/24"
          # mpirun must notice a machine it can no longer reach (its daemon there cannot report
          # the ranks' exits): TCP keepalive on its control connections, 1 s idle, 3 probes 1 s apart.
          --mca oob_tcp_keepalive_time 1 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3
          # Two daemons on one host both share their hwloc topology through a shared-memory
          # segment; in Open MPI 4.1 that crashed one daemon now and then (a segfault in
          # hwloc_shmem_topology_write). The segment is an optimisation: off.
          --mca rtc ^hwloc)
}
