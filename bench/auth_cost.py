#!/usr/bin/env python3
"""What JWT auth costs a held SSE subscriber: opens N streams against a running `c1m serve`
(each with ?token=TOKEN when given), times the subscribes, then reads the server's memory from
/status while all are held.

usage: bench/auth_cost.py HOST:PORT N [TOKEN]
Prints one line: subscribes/s, and RSS and PSS per held connection above the idle server.
"""
import json, resource, socket, sys, time, urllib.request

addr, n = sys.argv[1], int(sys.argv[2])
token = sys.argv[3] if len(sys.argv) > 3 else None
host, port = addr.rsplit(":", 1)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 100), hard))


def status():
    return json.load(urllib.request.urlopen(f"http://{addr}/status", timeout=5))


def wait_conns(count):
    for _ in range(200):
        s = status()
        if s["connections"]["sse"] == count:
            return s
        time.sleep(0.05)
    raise SystemExit(f"server never showed {count} SSE connections: {s['connections']}")


base = wait_conns(0)["memory"]
query = f"?token={token}" if token else ""
held = []
start = time.monotonic()
for i in range(n):
    s = socket.create_connection((host, int(port)))
    s.sendall(f"GET /sub/news{query} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
    held.append(s)
    # Read the heads in batches so the server works while the client sends.
    if len(held) % 100 == 0 or i == n - 1:
        for c in held[-100:]:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = c.recv(4096)
                if not chunk:
                    raise SystemExit(f"closed before the head: {head!r}")
                head += chunk
            if not head.startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"refused: {head.splitlines()[0]!r}")
elapsed = time.monotonic() - start
time.sleep(1.2)  # the memory sampler is at most 1 s old
mem = wait_conns(n)["memory"]
print(
    f"{n} SSE subscribes {'with' if token else 'without'} a token: {n / elapsed:.0f}/s; "
    f"per held connection: RSS {(mem['rss_bytes'] - base['rss_bytes']) / n:.0f} B, "
    f"PSS {(mem['pss_bytes'] - base['pss_bytes']) / n:.0f} B"
)
for s in held:
    s.close()
