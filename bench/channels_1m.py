#!/usr/bin/env python3
"""Driver of bench/channels-1m.sh: many distinct channels against one running `c1m serve`.

Holds SUBSCRIBERS SSE subscribers spread over the channel space, publishes one PAYLOAD-byte
message to each of CHANNELS distinct channels through /api/batch (NDJSON), and samples the
master's and the workers' RSS/PSS, /status and /api/channels at each phase: before, with
subscribers, with history, after the history expired, after the subscribers left. Every wait
is bounded; traffic goes to the loopback address given only. Prints one JSON report.
"""

import argparse
import json
import os
import socket
import sys
import time


def smaps(pid):
    out = {"rss": 0, "pss": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, v = line.split(":", 1)
                if k == "Rss":
                    out["rss"] = int(v.split()[0]) * 1024
                elif k == "Pss":
                    out["pss"] = int(v.split()[0]) * 1024
    except FileNotFoundError:
        pass
    return out


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


class Http:
    """One keep-alive HTTP/1.1 connection; answers read by Content-Length."""

    def __init__(self, host, port):
        self.s = socket.create_connection((host, port))
        self.s.settimeout(120)
        self.buf = b""

    def request(self, method, path, body=b"", ctype="application/json"):
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        started = time.monotonic()
        self.s.sendall(head + body)
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        while len(self.buf) < length:
            self._more()
        answer, self.buf = self.buf[:length], self.buf[length:]
        return status, answer, time.monotonic() - started

    def _more(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise SystemExit("server closed the connection")
        self.buf += d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--addr", required=True)
    ap.add_argument("--master-pid", type=int, required=True)
    ap.add_argument("--channels", type=int, default=1_000_000)
    ap.add_argument("--subscribers", type=int, default=5000)
    ap.add_argument("--payload", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8_000)
    ap.add_argument("--expiry-wait", type=float, default=400)
    a = ap.parse_args()
    host, port = a.addr.rsplit(":", 1)
    port = int(port)
    http = Http(host, port)
    report = {"channels": a.channels, "subscribers": a.subscribers, "payload": a.payload,
              "phases": {}}

    def name(i):
        return f"ch{i:07d}"

    def status():
        code, body, took = http.request("GET", "/status")
        assert code == 200, body
        return json.loads(body), len(body), took

    def channels_pages():
        """Every page of /api/channels at the largest limit; the time of each."""
        pages, cursor, names = [], None, 0
        for _ in range(1000):
            q = {"limit": 1000}
            if cursor:
                q["cursor"] = cursor
            code, body, took = http.request("POST", "/api/channels", json.dumps(q).encode())
            assert code == 200, body
            r = json.loads(body)["result"]
            names += len(r["channels"])
            pages.append({"seconds": round(took, 5), "bytes": len(body)})
            cursor = r.get("next_cursor")
            if not cursor:
                break
        code, body, _ = http.request("POST", "/api/channels", b'{"limit":1001}')
        return {"pages": len(pages), "names": names, "first_page": pages[0],
                "slowest_page_s": max(p["seconds"] for p in pages),
                "limit_over_cap": code}

    def phase(label):
        time.sleep(1.5)  # workers report every 250 ms; the master's expiry pass is 1 s
        s, size, took = status()
        workers = children(a.master_pid)
        wm = [smaps(p) for p in workers]
        p = {
            "master": smaps(a.master_pid),
            "workers": {"rss": sum(m["rss"] for m in wm), "pss": sum(m["pss"] for m in wm),
                        "count": len(wm)},
            "status": {"seconds": round(took, 5), "bytes": size,
                       "channels": s["channels"], "history_bytes": s["history_bytes"],
                       "connections": s["connections"]["total"]},
            "api_channels": channels_pages(),
        }
        report["phases"][label] = p
        print(f"{label}: master rss {p['master']['rss']} pss {p['master']['pss']}; workers "
              f"rss {p['workers']['rss']} pss {p['workers']['pss']}; /status "
              f"{p['status']}; /api/channels {p['api_channels']}", file=sys.stderr)
        return p

    phase("start")

    # Subscribers, spread evenly over the channel space.
    step = max(1, a.channels // max(1, a.subscribers))
    subs = []
    for i in range(a.subscribers):
        s = socket.create_connection((host, port))
        s.sendall(f"GET /sub/{name(i * step)} HTTP/1.1\r\nHost: bench\r\n"
                  "Accept: text/event-stream\r\n\r\n".encode())
        subs.append(s)
    for s in subs:
        s.settimeout(10)
        head = b""
        while b"\r\n\r\n" not in head:
            d = s.recv(4096)
            if not d:
                raise SystemExit("a subscriber was closed")
            head += d
        assert head.startswith(b"HTTP/1.1 200"), head[:200]
        s.setblocking(False)
    deadline = time.monotonic() + 60
    while status()[0]["connections"]["sse"] < a.subscribers:
        if time.monotonic() > deadline:
            raise SystemExit("subscribers never all counted")
        time.sleep(0.25)
    phase("subscribed")

    data = "x" * a.payload
    started = time.monotonic()
    errors = 0
    for first in range(0, a.channels, a.batch):
        last = min(a.channels, first + a.batch)
        body = "".join(f'{{"channel":"{name(i)}","data":"{data}"}}\n'
                       for i in range(first, last)).encode()
        code, answer, _ = http.request("POST", "/api/batch", body, "application/x-ndjson")
        assert code == 200, answer[:500]
        results = json.loads(answer)["result"]["results"]
        errors += sum(1 for r in results if "id" not in r)
    took = time.monotonic() - started
    report["publish"] = {"seconds": round(took, 2), "per_second": round(a.channels / took),
                         "errors": errors}
    print(f"published {a.channels} channels in {took:.1f}s ({a.channels / took:.0f}/s), "
          f"{errors} errors", file=sys.stderr)
    got = 0
    for s in subs:
        try:
            got += len(s.recv(1 << 16))
        except BlockingIOError:
            pass
    report["subscriber_bytes_received"] = got
    phase("history")

    deadline = time.monotonic() + a.expiry_wait
    while status()[0]["channels"] > 0:
        if time.monotonic() > deadline:
            raise SystemExit("history never expired")
        time.sleep(1)
    report["expired_after_publish_s"] = round(time.monotonic() - started, 1)
    phase("expired")

    for s in subs:
        s.close()
    deadline = time.monotonic() + 60
    while status()[0]["connections"]["sse"] > 0:
        if time.monotonic() > deadline:
            raise SystemExit("subscribers never all gone")
        time.sleep(0.25)
    time.sleep(5)  # an idle worker hands freed heap back every 5 s
    phase("unsubscribed")

    ph = report["phases"]
    n = a.channels
    report["bytes_per_channel"] = {
        "master_with_history": round((ph["history"]["master"]["rss"]
                                      - ph["subscribed"]["master"]["rss"]) / n, 1),
        "history_bytes_charged": round(ph["history"]["status"]["history_bytes"] / n, 1),
        "master_after_expiry": round((ph["expired"]["master"]["rss"]
                                      - ph["subscribed"]["master"]["rss"]) / n, 1),
        "records_charged_after_expiry": round(ph["expired"]["status"]["history_bytes"] / n, 1),
        "workers_per_subscriber": round((ph["subscribed"]["workers"]["rss"]
                                                 - ph["start"]["workers"]["rss"])
                                                / max(1, a.subscribers), 1),
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
