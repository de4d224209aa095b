#!/usr/bin/python3
"""The HTTP/1.1 layer of `epserve serve` spoken to over raw sockets (serve.http): pipelined
requests answered in order, a head that trickles in past --http-header-timeout answered 408,
a body that stalls past --http-read-timeout answered 408, an idle keep-alive connection closed
after --http-keep-alive, long targets 414, HEAD, 405, a bad request line 400, Expect:
100-continue. usage: http_client.py PORT  (the server runs with --http-header-timeout 2
--http-read-timeout 1 --http-keep-alive 1). Every socket operation is bounded."""
import json
import socket
import sys
import time

PORT = int(sys.argv[1])
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def connect(timeout=10):
    s = socket.create_connection(("127.0.0.1", PORT), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Reader:
    """Reads answers one after the other from a socket (whole, chunked, or to the close)."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def _more(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError
        self.buf += data

    def line(self):
        while b"\r\n" not in self.buf:
            self._more()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode("latin-1")

    def exactly(self, n):
        while len(self.buf) < n:
            self._more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def answer(self, head_only=False):
        """(status, headers, body) of the next answer."""
        status = int(self.line().split(" ", 2)[1])
        headers = {}
        while True:
            line = self.line()
            if not line:
                break
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
        if head_only or status == 100:
            return status, headers, b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.line().split(";")[0], 16)
                body += self.exactly(size)
                self.line()
                if size == 0:
                    return status, headers, body
        if "content-length" in headers:
            return status, headers, self.exactly(int(headers["content-length"]))
        try:
            while True:
                self._more()
        except EOFError:
            body, self.buf = self.buf, b""
            return status, headers, body

    def closed(self):
        """Whether the server closes the connection with nothing more to say."""
        try:
            self._more()
            return False
        except EOFError:
            return not self.buf
        except ConnectionResetError:
            return True


def request(method, path, body=None, extra=""):
    req = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
    if body is not None:
        data = json.dumps(body)
        req += f"Content-Type: application/json\r\nContent-Length: {len(data.encode())}\r\n\r\n{data}"
    else:
        req += "\r\n"
    return req.encode()


COMPLETION = {"prompt": "pipelined requests", "max_tokens": 6, "temperature": 0}

# The completion alone, on its own connection, for reference.
s = connect()
s.sendall(request("POST", "/v1/completions", COMPLETION, "Connection: close\r\n"))
status, _, body = Reader(s).answer()
s.close()
check(status == 200, f"a completion alone: {status}")
alone = json.loads(body)["choices"][0]["text"]

# Pipelining: three requests in one write, before any answer; answered in order.
s = connect()
s.sendall(request("GET", "/health") + request("POST", "/v1/completions", COMPLETION) +
          request("GET", "/v1/models", extra="Connection: close\r\n"))
r = Reader(s)
a1, a2, a3 = r.answer(), r.answer(), r.answer()
check([a1[0], a2[0], a3[0]] == [200, 200, 200], f"3 pipelined requests: {a1[0]}, {a2[0]}, {a3[0]}")
check(json.loads(a2[2])["choices"][0]["text"] == alone, "the pipelined completion = alone")
check(json.loads(a3[2])["object"] == "list", "the third pipelined answer is /v1/models'")
check(r.closed(), "closed after 'Connection: close'")
s.close()

# A streamed completion, then two more requests, pipelined: the stream ends, then the others.
s = connect()
s.sendall(request("POST", "/v1/completions", dict(COMPLETION, stream=True)) +
          request("POST", "/v1/completions", COMPLETION) + request("GET", "/health"))
r = Reader(s)
a1, a2, a3 = r.answer(), r.answer(), r.answer()
events = [l[6:] for l in a1[2].decode().split("\n") if l.startswith("data: ")]
streamed = "".join(json.loads(e)["choices"][0]["text"] for e in events if e != "[DONE]")
check(a1[0] == 200 and events[-1] == "[DONE]" and streamed == alone,
      f"a pipelined stream first: {a1[0]}, {len(events)} events, text equal: {streamed == alone}")
check(a2[0] == 200 and json.loads(a2[2])["choices"][0]["text"] == alone,
      "the completion pipelined behind a stream")
check(a3[0] == 200, "/health pipelined behind both")
s.close()

# Keep-alive: HEAD then GET on one connection; HEAD has the length but no body.
s = connect()
r = Reader(s)
s.sendall(request("HEAD", "/v1/models"))
st, h, _ = r.answer(head_only=True)
check(st == 200 and int(h.get("content-length", "0")) > 0, f"HEAD /v1/models: {st} {h}")
s.sendall(request("GET", "/health"))
check(r.answer()[0] == 200, "a second request on the same connection")
# Idle keep-alive: closed after --http-keep-alive (1 s).
t0 = time.monotonic()
s.settimeout(10)
check(r.closed(), "an idle keep-alive connection is closed")
idle = time.monotonic() - t0
check(0.5 < idle < 4, f"... after {idle:.1f} s (--http-keep-alive 1)")
s.close()

# A head that trickles in (a header line every 0.3 s) is cut at --http-header-timeout (2 s).
s = connect()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
t0 = time.monotonic()
got = None
s.settimeout(0.3)
for k in range(40):
    try:
        data = s.recv(65536)
        got = data
        break
    except socket.timeout:
        try:
            s.sendall(b"X-Slow-%d: 1\r\n" % k)
        except OSError:
            break
took = time.monotonic() - t0
check(got is not None and got.startswith(b"HTTP/1.1 408"),
      f"slow head: {got[:30] if got else got} after {took:.1f} s")
check(took < 5, f"... within the header timeout (2 s) plus slack: {took:.1f} s")
s.close()

# A body that stalls (half of its Content-Length, then nothing): 408 after --http-read-timeout.
s = connect()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Content-Length: 100\r\n\r\n{\"prompt\": ")
t0 = time.monotonic()
st = Reader(s).answer()[0]
check(st == 408 and time.monotonic() - t0 < 5, f"stalled body: {st} after {time.monotonic() - t0:.1f} s")
s.close()

# Long targets: over 8 KB 414; a request line longer than the whole head bound 414 as well.
for n in (20000, 40000):
    s = connect()
    s.sendall(b"GET /health?x=" + b"a" * n + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    st = Reader(s).answer()[0]
    check(st == 414, f"a {n}-byte target: {st}")
    s.close()

# A body over --max-body-bytes (1 MiB) sent whole without waiting (no Expect), by Content-Length
# and chunked: the client reads 413 after its write. (The server also drains a refused body for
# up to 2 s before closing; on loopback the answer survived a reset without it too, so this does
# not test the drain.)
big = b'{"prompt": "' + b"a" * 3_000_000 + b'"}'
for chunked in (False, True):
    s = connect()
    if chunked:
        head = b"Transfer-Encoding: chunked\r\n\r\n"
        payload = b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 65536]), big[i:i + 65536])
                           for i in range(0, len(big), 65536)) + b"0\r\n\r\n"
    else:
        head, payload = b"Content-Length: %d\r\n\r\n" % len(big), big
    try:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  b"Content-Type: application/json\r\n" + head + payload)
    except OSError as e:
        print(f"     (the write ended early: {e})")
    try:
        st, _, body = Reader(s).answer()
    except (OSError, EOFError) as e:
        st, body = repr(e), b""
    check(st == 413 and b"request_too_large" in body,
          f"a 3 MB body ({'chunked' if chunked else 'Content-Length'}) sent whole: {st}")
    s.close()

# A route's wrong method: 405 naming the allowed one.
s = connect()
s.sendall(request("GET", "/v1/completions", extra="Connection: close\r\n"))
st, h, body = Reader(s).answer()
check(st == 405 and h.get("allow") == "POST", f"GET /v1/completions: {st}, Allow {h.get('allow')}")
s.close()

# A path that is not UTF-8 (found by the fuzzer: quoting it in the 404's JSON threw and ended
# the process): 404, the server still up.
s = connect()
s.sendall(b"POST /toke\xffnize HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
st = Reader(s).answer()[0]
check(st == 404, f"a path with a byte 0xFF: {st}")
s.close()

# Garbage for a request line: 400, closed.
s = connect()
s.sendall(b"\x00\x01 nonsense\r\n\r\n")
r = Reader(s)
st = r.answer()[0]
check(st == 400 and r.closed(), f"a bad request line: {st}, then closed")
s.close()

# Expect: 100-continue: the interim answer, then the body is read and answered.
s = connect()
data = json.dumps(COMPLETION).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
          b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(data))
r = Reader(s)
st1 = r.answer()[0]
s.sendall(data)
st2, _, body = r.answer()
check(st1 == 100 and st2 == 200 and json.loads(body)["choices"][0]["text"] == alone,
      f"Expect: 100-continue: {st1} then {st2}")
s.close()

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
