# Shared by the serve tests: start `epserve serve` on a free port, stop it, small JSON checks.
# Every wait is bounded; the server is killed on exit whatever happens.
SERVER_PID=""
ENGINE_PIDS=()
trap 'kill -KILL $SERVER_PID ${ENGINE_PIDS[@]} 2>/dev/null || true' EXIT

# start_engines N MODEL LOGPREFIX [ARGS...]: N one-process engine services (`epserve engine`, each one DP
# group holding every expert) on free loopback ports; sets ENGINE_PIDS and ENGINES
# ("host:port,host:port,...", for serve --engines).
start_engines() {
  local n=$1 model=$2 prefix=$3 g a
  shift 3
  local addrs=()
  for ((g = 0; g < n; ++g)); do
    "$EPSERVE" engine --model "$model" --port 0 --kv-memory 64M --threads 1 "$@" >"$prefix-$g.log" 2>&1 &
    ENGINE_PIDS+=($!)
  done
  for ((g = 0; g < n; ++g)); do
    for _ in $(seq 1 300); do
      grep -q 'listening on' "$prefix-$g.log" && break
      sleep 0.1
    done
    a=$(sed -n 's/.* listening on \(.*\)$/\1/p' "$prefix-$g.log")
    [[ -n $a ]] || { cat "$prefix-$g.log"; echo "FAIL: engine $g did not listen in 30 s"; exit 1; }
    addrs+=("$a")
  done
  ENGINES=$(IFS=,; echo "${addrs[*]}")
}

# stop_engines: SIGTERM; each must exit 0 within 10 s.
stop_engines() {
  local p rc
  for p in "${ENGINE_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${ENGINE_PIDS[@]}"; do
    rc=0
    timeout 10 tail --pid="$p" -f /dev/null || { echo "FAIL: engine $p did not exit 10 s after SIGTERM"; exit 1; }
    wait "$p" || rc=$?
    [[ $rc -eq 0 || $rc -eq 127 ]] || { echo "FAIL: engine $p exited with $rc"; exit 1; }
  done
  ENGINE_PIDS=()
}

# skip_without_gpu MODEL ARGS...: when ARGS ask for --device cuda and this machine or build
# cannot use a GPU, prints the reason and exits 77 (CTest: skipped).
skip_without_gpu() {
  local model=$1 probe
  shift
  [[ " $* " == *" --device cuda"* ]] || return 0
  if ! probe=$("$EPSERVE" generate --model "$model" --prompt-ids 1 --max-tokens 1 "$@" 2>&1); then
    echo "SKIPPED: $(grep -m1 error <<<"$probe")"
    exit 77
  fi
}

# start_server LOG ARGS...: sets SERVER_PID, PORT and BASE.
start_server() {
  local log=$1
  shift
  "$EPSERVE" serve --port 0 --kv-memory 64M --threads 1 "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 300); do
    grep -q '^epserve: serving .* on https\?://' "$log" && break
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$log"; echo "FAIL: the server exited"; exit 1; fi
    sleep 0.1
  done
  PORT=$(sed -n 's|^epserve: serving .* on https\?://[^:]*:\([0-9]*\).*$|\1|p' "$log")
  [[ -n $PORT ]] || { cat "$log"; echo "FAIL: no 'serving ... on' line in 30 s"; exit 1; }
  BASE=http://127.0.0.1:$PORT
  if grep -q '^epserve: serving .* on https://' "$log"; then BASE=https://127.0.0.1:$PORT; fi
}

# stop_server [SECONDS]: SIGTERM, then the server must exit 0 within SECONDS (default 10; more
# where it first drains a long stream, whose length in time depends on the machine).
stop_server() {
  local bound=${1:-10}
  kill -TERM "$SERVER_PID"
  for _ in $(seq 1 $((bound * 10))); do
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$SERVER_PID" 2>/dev/null; then echo "FAIL: no exit $bound s after SIGTERM"; exit 1; fi
  local rc=0
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=""
  [[ $rc -eq 0 ]] || { echo "FAIL: the server exited with $rc after SIGTERM"; exit 1; }
}

fail() { echo "FAIL: $*"; exit 1; }

# metric 'NAME' or metric 'NAME{k="v",...}': the sum of NAME's /metrics series whose labels
# include every k="v" given (over all DP groups unless group="G" is one of them).
metric() {
  curl -s --max-time 5 ${CURL_TLS:-} "$BASE/metrics" | /usr/bin/python3 -c '
import re, sys
want = sys.argv[1]
name, _, rest = want.partition("{")
need = set(re.findall(r"(\w+)=\"([^\"]*)\"", rest))
total, seen = 0.0, False
for line in sys.stdin:
    if line.startswith("#"):
        continue
    m = re.match(r"([^{ ]+)(?:\{(.*)\})? (\S+)$", line.strip())
    if not m or m.group(1) != name:
        continue
    labels = set(re.findall(r"(\w+)=\"([^\"]*)\"", m.group(2) or ""))
    if need <= labels:
        total += float(m.group(3)); seen = True
if seen:
    print(int(total) if total == int(total) else total)
' "$1"
}
