#!/usr/bin/env bash
# serve.http_framing: how the server frames HTTP/1.1 messages and ends connections (issue 48),
# over raw loopback sockets, every socket operation bounded:
#   - a Transfer-Encoding other than exactly `chunked` is answered 501 (an unknown coding:
#     gzip, identity, xchunked, gzip before chunked) or 400 (a malformed list, chunked not
#     last or twice, beside Content-Length, under HTTP/1.0), then the connection closes: the
#     bytes after the head are never served as another request (request smuggling);
#   - at the keep-alive limit (1,000 requests on one connection) every answer written reaches
#     the client, though it pipelined more: the server shuts down its side and drains the
#     rest before closing (a close with unread input sends a reset that can discard answers
#     from the client's buffer);
#   - with the --http-threads bound held by slow heads, /health answers 200 saying
#     `degraded: HTTP connections at the bound`, a completion gets a fast 503, and /health is
#     plain again once they close.
# With a third argument `admin` instead (serve.http_admin_rate_limit): `serve --np 2
# --replace-every 0` accepts POST /admin/replace-experts once, then answers 429 with
# Retry-After until --admin-replace-interval (default 10 s) has passed.
# Usage: http_framing_test.sh EPSERVE WORKDIR [admin]
set -euo pipefail
EPSERVE=$1 WORK=$2 PART=${3:-framing}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"
rm -rf "$WORK" && mkdir -p "$WORK"
"$EPSERVE" make-model --preset tiny --seed 2 --out "$WORK/model" >/dev/null

if [[ $PART == admin ]]; then
  start_server "$WORK/server.log" --model "$WORK/model" --np 2 --replace-every 0  # the default: 10 s
  post() { curl -s --max-time 10 -D "$WORK/head.txt" -o "$WORK/admin.json" -w '%{http_code}' -X POST "$BASE/admin/replace-experts"; }
  for _ in $(seq 1 50); do  # 503 replacement_unavailable while the world is still getting ready
    code=$(post)
    [[ $code == 503 ]] || break
    sleep 0.2
  done
  [[ $code == 200 ]] || { cat "$WORK/admin.json"; fail "the first POST /admin/replace-experts: $code, want 200"; }
  for k in 1 2 3; do
    code=$(post)
    [[ $code == 429 ]] || { cat "$WORK/admin.json"; fail "POST /admin/replace-experts again ($k): $code, want 429"; }
    grep -q rate_limit_exceeded "$WORK/admin.json" || fail "429 without code rate_limit_exceeded: $(cat "$WORK/admin.json")"
    after=$(sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9]*\).*$/\1/p' "$WORK/head.txt")
    [[ -n $after && $after -ge 1 && $after -le 10 ]] || fail "Retry-After '$after', want 1..10: $(cat "$WORK/head.txt")"
  done
  grep -q -- "--admin-replace-interval" <<<"$("$EPSERVE" serve --help)" || fail "no --admin-replace-interval in serve --help"
  stop_server 30
  echo "serve.http_admin_rate_limit: ok"
  exit 0
fi

start_server "$WORK/server.log" --model "$WORK/model" --http-threads 4 --http-header-timeout 20 \
  --http-keep-alive 1
timeout 60 /usr/bin/python3 - "$PORT" <<'EOF' || fail "see the lines above"
import socket, sys, threading, time

PORT = int(sys.argv[1])
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def connect(timeout=5):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s):
    """Everything the server sends until it closes (None: it reset or went silent for 5 s)."""
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return out
            out += d
    except OSError as e:
        print(f"     ({e!r} after {len(out)} bytes)")
        return None


def answers(data):
    """The answers in `data` as (status, headers, body) (bodies by Content-Length only)."""
    out = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for l in lines[1:]:
            k, _, v = l.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        out.append((int(lines[0].split(" ")[1]), headers, rest[:n]))
        data = rest[n:]
    return out


def get(path, timeout=5):
    s = connect(timeout)
    t0 = time.monotonic()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    data = read_all(s)
    s.close()
    a = answers(data) if data else []
    return (a[0][0], a[0][2].decode(), time.monotonic() - t0) if a else (None, "", 0)


# 1. Transfer-Encoding: anything but exactly `chunked` is refused and the connection closed; a
# smuggled request after the head must never be answered.
SMUGGLED = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
CHUNKED_BODY = b"c\r\n{\"prompt\": \"\r\n7\r\nhello\"}\r\n0\r\n\r\n"
cases = [
    ("gzip", [b"Transfer-Encoding: gzip"], b"", 501),
    ("chunked, identity", [b"Transfer-Encoding: chunked, identity"], b"", 400),
    ("identity, xchunked", [b"Transfer-Encoding: identity, xchunked"], b"", 501),
    ("gzip, chunked", [b"Transfer-Encoding: gzip, chunked"], CHUNKED_BODY, 501),
    ("chunked, chunked", [b"Transfer-Encoding: chunked, chunked"], CHUNKED_BODY, 400),
    ("chunked on two lines", [b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"],
     CHUNKED_BODY, 400),
    ("chunked;x=1", [b"Transfer-Encoding: chunked;x=1"], CHUNKED_BODY, 501),
    ("empty", [b"Transfer-Encoding: "], b"", 400),
    (", chunked", [b"Transfer-Encoding: , chunked"], CHUNKED_BODY, 400),
    ("chun ked", [b"Transfer-Encoding: chun ked"], b"", 400),
    ("chunked + Content-Length", [b"Transfer-Encoding: chunked", b"Content-Length: 5"],
     CHUNKED_BODY, 400),
    ("Content-Length + gzip", [b"Content-Length: 0", b"Transfer-Encoding: gzip"], b"", 400),
]
for method, path in (("POST", "/tokenize"), ("GET", "/health")):
    for name, lines, body, want in cases:
        s = connect()
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode() +
                  b"".join(l + b"\r\n" for l in lines) + b"\r\n" + body + SMUGGLED)
        data = read_all(s)
        s.close()
        got = answers(data) if data else []
        statuses = [a[0] for a in got]
        check(statuses == [want] and got[0][1].get("connection", "").lower() == "close",
              f"{method} {path}, Transfer-Encoding '{name}': answers {statuses}, want [{want}] "
              f"and closed")
# The same under HTTP/1.0: no transfer codings at all (RFC 9112 6.1).
s = connect()
s.sendall(b"POST /tokenize HTTP/1.0\r\nContent-Type: application/json\r\n"
          b"Transfer-Encoding: chunked\r\n\r\n" + CHUNKED_BODY + SMUGGLED)
data = read_all(s)
s.close()
statuses = [a[0] for a in answers(data)] if data else []
check(statuses == [400], f"HTTP/1.0 with Transfer-Encoding: chunked: answers {statuses}, want [400]")
# Exactly `chunked` (any case, surrounding spaces) is served, and so is what follows.
for te in (b"chunked", b" CHUNKED ", b"Chunked"):
    s = connect()
    s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding:" + te + b"\r\n\r\n" + CHUNKED_BODY +
              b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = read_all(s)
    s.close()
    got = answers(data) if data else []
    check([a[0] for a in got] == [200, 200] and b'"tokens"' in got[0][2],
          f"Transfer-Encoding '{te.decode()}': answers {[a[0] for a in got]}, want [200, 200]")

# 2. The keep-alive limit (1,000 requests): 1,010 pipelined, then read only after the server has
# answered 1,000 and ended the connection. Every answer arrives, then a clean end (no reset).
N, LIMIT = 1010, 1000
s = connect(timeout=10)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
sender = threading.Thread(target=lambda: s.sendall(req * N), daemon=True)
sender.start()
sender.join(10)
time.sleep(1.0)
data = read_all(s)
s.close()
got = answers(data) if data is not None else []
check(data is not None, "the connection at the keep-alive limit ended without a reset")
check(len(got) == LIMIT and all(a[0] == 200 for a in got),
      f"{len(got)} answers of {N} pipelined requests, want {LIMIT} (the keep-alive limit)")
check(bool(got) and got[-1][1].get("connection", "").lower() == "close",
      "the last answer says Connection: close")

# 3. The connection bound (--http-threads 4) held by 4 slow heads: /health degraded, a fast 503.
status, body, _ = get("/health")
check(status == 200 and "degraded" not in body, f"/health before: {status} {body!r}")
slow = []
for _ in range(4):
    c = connect(timeout=30)
    c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
    slow.append(c)
time.sleep(0.5)
status, body, _ = get("/health")
check(status == 200 and "degraded: HTTP connections at the bound" in body,
      f"/health with the bound held: {status} {body!r}")
s = connect()
t0 = time.monotonic()
body = b'{"prompt": "hi", "max_tokens": 2}'
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
data = read_all(s)
took = time.monotonic() - t0
s.close()
got = answers(data) if data else []
check(bool(got) and got[0][0] == 503 and b"too_many_connections" in got[0][2] and took < 3,
      f"a completion with the bound held: {[a[0] for a in got]} in {took:.1f} s")
for c in slow:
    c.close()
for _ in range(50):
    status, body, _ = get("/health")
    if status == 200 and "degraded" not in body:
        break
    time.sleep(0.1)
check(status == 200 and "degraded" not in body, f"/health once they closed: {status} {body!r}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
EOF
[[ $(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "$BASE/health") == 200 ]] || fail "/health afterwards"
stop_server
echo "serve.http_framing: ok"
