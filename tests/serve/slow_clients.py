#!/usr/bin/python3
"""Opens N connections to 127.0.0.1:PORT that send a request's headers one line every
INTERVAL seconds (slowloris) and holds them for SECONDS; prints 'open N' once all are open.
usage: slow_clients.py PORT N SECONDS [INTERVAL]"""
import socket
import sys
import time

port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
interval = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    socks.append(s)
print(f"open {len(socks)}", flush=True)
end = time.monotonic() + seconds
k = 0
while time.monotonic() < end:
    time.sleep(min(interval, max(0.0, end - time.monotonic())))
    for s in socks:
        try:
            s.sendall(b"X-Slow-%d: 1\r\n" % k)
        except OSError:
            pass
    k += 1
for s in socks:
    s.close()
