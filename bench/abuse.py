#!/usr/bin/env python3
"""The abuse suite: every way a request, a peer or a signal once broke c1m serve,
replayed against real servers on loopback. Run through bench/abuse.sh (it builds c1m).

One line per case: what was sent, what a production gateway must answer, what was seen, and
ok/FAIL. The summary counts worker deaths (workers that died and were restarted without the
suite killing them on purpose) and silent losses (message ids a subscriber never got and no
gap event covered). Both must be 0. Exit status: 0 all ok, 1 a case failed.

Standard library only. Every wait is bounded; every server started here is stopped here.
"""

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

C1M = sys.argv[1]
PORT = int(os.environ.get("PORT", "18700"))
KEY = "abuse-key"
LOG_DIR = os.environ.get("LOG_DIR", "/tmp")

results = []  # (case, sent, expected, seen, ok)
deaths = 0
silent_losses = 0
servers = []


def report(case, sent, expected, seen, ok):
    results.append((case, sent, expected, seen, ok))
    print(f"{'ok  ' if ok else 'FAIL'} {case:<34} sent: {sent} | expected: {expected} | seen: {seen}",
          flush=True)


# ---- servers --------------------------------------------------------------------------------

class Serve:
    """c1m serve on 127.0.0.1:port with extra flags; stopped (and its deaths counted) by stop()."""

    def __init__(self, name, port, *flags, listen="127.0.0.1"):
        self.name, self.port, self.intended_restarts = name, port, 0
        self.host = listen
        self.log = open(os.path.join(LOG_DIR, f"abuse-{name}.log"), "wb")
        self.proc = subprocess.Popen([C1M, "serve", "--listen", f"{listen}:{port}", *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        servers.append(self)
        for _ in range(100):
            try:
                if http(port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", first=True,
                        host=listen)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{name}: c1m serve did not come up on port {port}")

    def status(self):
        # Bounded retries: right after a worker is killed its socket may answer nothing.
        for _ in range(50):
            try:
                return json.loads(get_body(self.port, "/status", host=self.host))
            except (OSError, ValueError):
                time.sleep(0.1)
        raise RuntimeError(f"{self.name}: /status does not answer")

    def metrics(self):
        out = {}
        for line in get_body(self.port, "/metrics", host=self.host).decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def published(self):
        return self.status()["messages"]["published"]

    def stop(self):
        """SIGTERM, bounded wait; returns the exit code. Counts unintended worker restarts."""
        global deaths
        if self.proc.poll() is None:
            try:
                deaths += max(0, self.status()["worker_restarts"] - self.intended_restarts)
            except (OSError, ValueError, KeyError):
                pass
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


# ---- HTTP, SSE and WebSocket clients (just enough of each) -----------------------------------

def http(port, raw, first=False, timeout=3.0, src=None, host="127.0.0.1"):
    """Sends raw bytes; returns the status codes of every response read until close/timeout
    (or only the first one with first=True), and the bytes read."""
    s = socket.socket()
    if src:
        s.bind((src, 0))
    s.settimeout(timeout)
    s.connect((host, port))
    data = b""
    try:
        s.sendall(raw)
        while True:
            if first and b"\r\n\r\n" in data:
                break
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    finally:
        s.close()
    codes = [int(part[:3]) for part in data.split(b"HTTP/1.1 ")[1:]
             if part[3:4] == b" " and part[:3].isdigit()]
    if first:
        codes = [int(data[9:12])] if data.startswith(b"HTTP/1.1 ") else [0]
        return codes[0], data
    return codes, data


def get_body(port, path, headers="", host="127.0.0.1"):
    _, data = http(port, f"GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n{headers}\r\n"
                   .encode(), timeout=30, host=host)
    head, _, body = data.partition(b"\r\n\r\n")
    return body


def publish(port, channel, payload, key=None):
    """Returns (status, id); id is None unless the publish was taken."""
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    raw = (f"POST /pub/{channel} HTTP/1.1\r\nHost: a\r\n{auth}Content-Length: {len(payload)}\r\n"
           f"Connection: close\r\n\r\n").encode() + payload
    code, data = http(port, raw, timeout=10)
    code = code[0] if code else 0
    body = data.partition(b"\r\n\r\n")[2]
    return code, json.loads(body)["id"] if code == 200 else None


class Keepalive:
    """One keep-alive connection for many publishes (latency measurements)."""

    def __init__(self, port, key=None):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.auth = f"Authorization: Bearer {key}\r\n" if key else ""

    def publish(self, channel, payload):
        """Returns (status, id); id is None unless the publish was taken."""
        self.s.sendall((f"POST /pub/{channel} HTTP/1.1\r\nHost: a\r\n{self.auth}"
                        f"Content-Length: {len(payload)}\r\n\r\n").encode() + payload)
        data = b""
        while b"\r\n\r\n" not in data:
            data += self.s.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next((l.split(b":")[1] for l in head.split(b"\r\n")
                           if l.lower().startswith(b"content-length:")), b"0"))
        while len(body) < length:
            body += self.s.recv(65536)
        code = int(head[9:12])
        return code, json.loads(body)["id"] if code == 200 else None


class SseReader(threading.Thread):
    """An SSE subscriber that reads in the background and records ids and gaps."""

    def __init__(self, port, channel, last_id=None, paused=False):
        super().__init__(daemon=True)
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        extra = f"Last-Event-ID: {last_id}\r\n" if last_id is not None else ""
        self.s.sendall(f"GET /sub/{channel} HTTP/1.1\r\nHost: a\r\nAccept: text/event-stream\r\n"
                       f"{extra}\r\n".encode())
        self.ids, self.gaps, self.events, self.closed = [], [], [], False
        self.go = threading.Event()
        if not paused:
            self.go.set()
        self.start()

    def run(self):
        self.go.wait()
        buf = b""
        try:
            while True:
                chunk = self.s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    self.parse(event)
        except OSError:
            pass
        self.closed = True

    def parse(self, event):
        name, data, eid = b"", [], None
        for line in event.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:]
            elif line.startswith(b"id: "):
                eid = int(line[4:])
            elif line.startswith(b"data: "):
                data.append(line[6:])
        if name == b"gap":
            self.gaps.append(json.loads(b"\n".join(data)))
        elif name:
            self.events.append(name.decode())
        if eid is not None:
            self.ids.append(eid)

    def close(self):
        try:
            self.s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.s.close()


def lost_without_gap(wanted_ids, reader):
    """Ids the reader never got that no gap event covers."""
    got = set(reader.ids)
    covered = lambda i: any(g["after"] < i <= g["through"] for g in reader.gaps)
    return [i for i in wanted_ids if i not in got and not covered(i)]


def wait_for(cond, secs):
    end = time.time() + secs
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def ws_connect(port, path, headers=""):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{headers}\r\n".encode())
    data = b""
    while b"\r\n\r\n" not in data:
        data += s.recv(4096)
    head, _, rest = data.partition(b"\r\n\r\n")
    return s, int(head[9:12]), rest


def ws_send_text(s, text):
    payload, mask = text.encode(), os.urandom(4)
    assert len(payload) < 126
    s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask +
              bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))


def ws_read_frame(s, rest=b""):
    """(opcode, payload, rest); opcode 0 when the peer closed without a frame."""
    buf = rest
    while True:
        if len(buf) >= 2:
            n, at = buf[1] & 0x7F, 2
            if n == 126 and len(buf) >= 4:
                n, at = int.from_bytes(buf[2:4], "big"), 4
            elif n == 127 and len(buf) >= 10:
                n, at = int.from_bytes(buf[2:10], "big"), 10
            if n < 126 or at > 2:
                if len(buf) >= at + n:
                    return buf[0] & 0x0F, buf[at:at + n], buf[at + n:]
        chunk = s.recv(65536)
        if not chunk:
            return 0, b"", b""
        buf += chunk


def p50(xs):
    return sorted(xs)[len(xs) // 2]


# ---- the cases ------------------------------------------------------------------------------

def item1_big_replay(a):
    for _ in range(20):
        publish(a.port, "big", b"x" * (1 << 20), KEY)
    got, rounds, last = [], 0, 0
    while len(got) < 20 and rounds < 100:
        rounds += 1
        body = json.loads(get_body(a.port, f"/sub/big?last_id={last}"))
        got += [m["id"] for m in body["messages"]]
        last = body["last_id"]
    sse = SseReader(a.port, "big", last_id=0)
    wait_for(lambda: len(sse.ids) >= 20, 20)
    sse.close()
    restarts = a.status()["worker_restarts"]
    report("item1 resume of 20 MiB history", "20 x 1 MiB, resume from 0 (long-poll, SSE)",
           "20 and 20 messages, 0 worker restarts",
           f"{len(got)} in {rounds} polls, {len(sse.ids)} by SSE, {restarts} restarts",
           len(got) == 20 and len(sse.ids) == 20 and restarts == 0)


def item6_long_resume(a):
    global silent_losses
    ids = [publish(a.port, "lp", b"y" * 60 * 1024, KEY)[1] for _ in range(100)]
    # Resume from 0: ids before the channel's first message never existed on it; only a gap
    # reaching into the published ids would mean a loss.
    real_gap = lambda g: g["through"] >= ids[0]
    got, gaps, last, rounds = [], 0, 0, 0
    while rounds < 200:
        rounds += 1
        body = json.loads(get_body(a.port, f"/sub/lp?last_id={last}"))
        got += [m["id"] for m in body["messages"]]
        gaps += len([g for g in body.get("gaps", []) if real_gap(g)])
        if body["last_id"] == last or len(got) >= 100:
            break
        last = body["last_id"]
    sse = SseReader(a.port, "lp", last_id=0)
    wait_for(lambda: len(sse.ids) >= 100, 20)
    sse.close()
    gaps += len([g for g in sse.gaps if real_gap(g)])
    silent_losses += len(lost_without_gap(ids, sse)) + len(set(ids) - set(got))
    ok = len(set(got)) == 100 and len(sse.ids) == 100 and gaps == 0
    report("item6 6 MB resume (long-poll, SSE)", "100 x 60 KiB, resume from 0",
           "100 and 100 messages, 0 gaps", f"{len(set(got))} in {rounds} polls, "
           f"{len(sse.ids)} by SSE, {gaps} gaps", ok)


SMUGGLED = b"POST /pub/smuggled HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nevil!"


def item3_smuggling(b):
    before = b.published()
    attacks = {
        "CL.0 GET with a body": b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n"
                                % len(SMUGGLED) + SMUGGLED,
        "CL.CL differing": b"POST /pub/cl HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n"
                           b"Content-Length: 0\r\n\r\nevil!",
        "signed CL (+5)": b"POST /pub/cl HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nevil!",
        "CL list (5, 5)": b"POST /pub/cl HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nevil!",
        "TE.CL": b"POST /pub/cl HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
                 b"Content-Length: 4\r\n\r\n5\r\nevil!\r\n0\r\n\r\n",
        "TE xchunked": b"POST /pub/cl HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n"
                       b"5\r\nevil!\r\n0\r\n\r\n",
        "TE chunked, identity": b"POST /pub/cl HTTP/1.1\r\nHost: a\r\n"
                                b"Transfer-Encoding: chunked, identity\r\n\r\n5\r\nevil!\r\n0\r\n\r\n",
        "TE with obs-fold": b"POST /pub/cl HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n"
                            b"\r\n5\r\nevil!\r\n0\r\n\r\n",
    }
    for name, raw in attacks.items():
        codes, _ = http(b.port, raw, timeout=2)
        ok = bool(codes) and codes[0] in (400, 501) and len(codes) == 1
        report(f"item3 {name}", f"{len(raw)} B on one connection",
               "one 400/501, connection closed", f"answers {codes}", ok)
    after = b.published()
    report("item3 smuggled publishes", f"{len(attacks)} attacks", "0 published",
           f"{after - before} published", after == before)


def item9_pipelined(b):
    n = 6000
    req = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
    s = socket.create_connection(("127.0.0.1", b.port), timeout=10)
    counted = [0]

    def reader():
        buf = b""
        try:
            while counted[0] < n:
                chunk = s.recv(1 << 16)
                if not chunk:
                    return
                buf += chunk
                counted[0] += buf.count(b"HTTP/1.1 200")
                buf = buf[buf.rfind(b"HTTP/1.1 200") + 1:] if b"HTTP/1.1 200" in buf else buf
        except OSError:
            return

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    try:
        s.sendall(req * n)
    except OSError:
        pass
    t.join(15)
    s.close()
    report("item9 pipelined requests", f"{n} GET /healthz in {len(req) * n // 1024} KiB",
           f"{n} answers", f"{counted[0]} answers", counted[0] == n)


def item5_ws_publish_without_key(a):
    before = a.published()
    s, code, rest = ws_connect(a.port, "/sub/wspub")
    ws_send_text(s, "unauthorised")
    op, payload, _ = ws_read_frame(s, rest)
    s.close()
    close_code = int.from_bytes(payload[:2], "big") if op == 8 and len(payload) >= 2 else None
    delta = a.published() - before
    report("item5 WS publish without the key", "upgrade without key, one text frame",
           "close 1008, 0 published", f"upgrade {code}, close {close_code}, {delta} published",
           close_code == 1008 and delta == 0)


def item11_plain_ws_resume(a):
    s, code, rest = ws_connect(a.port, "/sub/wsplain")
    time.sleep(0.3)  # the join reaches the master asynchronously
    publish(a.port, "wsplain", b"hello", KEY)
    op, payload, _ = ws_read_frame(s, rest)
    s.close()
    try:
        has_id = "id" in json.loads(payload)
    except ValueError:
        has_id = False
    report("item11 default WebSocket carries ids", "GET /sub/wsplain (no query), 1 publish",
           "a frame with the message id", f"opcode {op}: {payload[:60]!r}", has_id)


def item10_counters_monotonic(b):
    for i in range(20):
        publish(b.port, "mono", b"m%d" % i)
    http(b.port, b"GET /nope HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    before = {k: v for k, v in b.metrics().items() if "_total" in k}
    pid = b.status()["workers"][0]["pid"]
    os.kill(pid, signal.SIGKILL)
    b.intended_restarts += 1
    wait_for(lambda: b.status()["worker_restarts"] >= b.intended_restarts
             and all(w["pid"] != pid for w in b.status()["workers"]), 10)
    time.sleep(1.5)
    after = b.metrics()
    fell = [k for k, v in before.items() if after.get(k, 0) < v]
    report("item10 counters across a worker kill", f"kill -9 worker {pid} after traffic",
           "every _total >= before", f"{len(fell)} of {len(before)} fell {fell[:3]}", not fell)


def item11_healthz_master_stopped(b):
    os.kill(b.proc.pid, signal.SIGSTOP)
    try:
        code = http(b.port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", first=True, timeout=5)[0]
    except OSError as e:
        code = f"error {e}"
    finally:
        os.kill(b.proc.pid, signal.SIGCONT)
    report("item11 /healthz with master stopped", "SIGSTOP master, GET /healthz", "503",
           f"{code}", code == 503)


def item11_second_instance(b):
    p = subprocess.Popen([C1M, "serve", "--listen", f"127.0.0.1:{b.port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        code = p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        code = "still running after 10 s"
    report("item11 second instance, same port", f"c1m serve --listen 127.0.0.1:{b.port}",
           "exit 2", f"exit {code}", code == 2)


def item11_payload_over_frame():
    p = subprocess.run([C1M, "serve", "--listen", "127.0.0.1:0", "--max-payload", "33554432"],
                       capture_output=True, timeout=10)
    report("item11 --max-payload over the frame", "--max-payload 33554432", "exit 2",
           f"exit {p.returncode}", p.returncode == 2)


def item11_history_bytes():
    global silent_losses
    c = Serve("history", PORT + 3, "--workers", "1", "--history-max-bytes", "4194304")
    try:
        for i in range(200):
            publish(c.port, f"h{i % 10}", b"z" * 50 * 1024)
        held = c.status()["history_bytes"]
        r = SseReader(c.port, "h0", last_id=0)
        wait_for(lambda: r.gaps or len(r.ids) >= 10, 5)
        r.close()
        ok = 3 << 20 < held <= 4 << 20 and r.gaps and 0 < len(r.ids) < 20
        report("item11 history bounded in bytes", "200 x 50 KiB on 10 channels, 4 MiB cap",
               "3-4 MiB held, resume: a gap, then the rest", f"history {held} B, {len(r.ids)} msgs, "
               f"{len(r.gaps)} gaps", ok)
    finally:
        c.stop()


def item2_stalled_worker():
    global silent_losses
    d = Serve("stall", PORT + 4, "--workers", "2", "--max-unsent", "67108864")
    try:
        readers = [SseReader(d.port, "stall") for _ in range(20)]
        time.sleep(0.5)
        pid = d.status()["workers"][0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        accepted, refused, end = [], 0, time.time() + 20
        try:
            # A publisher connection the running worker serves (SO_REUSEPORT picks the worker):
            # a probe that times out landed on the stopped one.
            conn = None
            for _ in range(32):
                probe = Keepalive(d.port)
                probe.s.settimeout(0.5)
                try:
                    probe.publish("probe", b"p")
                    conn = probe
                    break
                except socket.timeout:
                    probe.s.close()
            conn.s.settimeout(10)
            # 10,000 x 32 KiB is 320 MiB, past the 256 MiB the old master queued before it
            # began to drop; pushed back, the loop ends after 200 refusals.
            while time.time() < end and len(accepted) < 10000 and refused < 200:
                code, mid = conn.publish("stall", b"s" * 32 * 1024)
                if code == 200:
                    accepted.append(mid)
                elif code == 503:
                    refused += 1
        finally:
            os.kill(pid, signal.SIGCONT)
        n = len(accepted)
        wait_for(lambda: all(len(r.ids) >= n or r.closed for r in readers), 30)
        # A subscriber closed by the server (slow consumer) is told and counted: not silent.
        lost = sum(len(lost_without_gap(accepted, r)) for r in readers if not r.closed)
        closed = sum(r.closed for r in readers)
        for r in readers:
            r.close()
        silent_losses += lost
        report("item2 stalled worker", "SIGSTOP a worker, up to 10,000 x 32 KiB",
               "503s push back, 0 lost", f"{n} accepted, {refused} refused (503), "
               f"{lost} lost, {closed} subscribers closed", refused > 0 and lost == 0)
    finally:
        d.stop()


def item4_status_cost(b):
    # A master of realistic size: the old /status read smaps of every process, whose cost
    # grows with the master's memory (history here: 2,000 x 64 KiB = 125 MiB).
    fill = Keepalive(b.port)
    for _ in range(2000):
        fill.publish("fill", b"f" * 65000)
    def run(samples):
        conn, lat = Keepalive(b.port), []
        for _ in range(samples):
            t = time.perf_counter()
            conn.publish("cost", b"c")
            lat.append(time.perf_counter() - t)
        return p50(lat) * 1000

    quiet = run(300)
    stop = threading.Event()

    def poller():
        while not stop.is_set():
            get_body(b.port, "/status")
            stop.wait(0.1)

    pollers = [threading.Thread(target=poller, daemon=True) for _ in range(16)]
    for t in pollers:
        t.start()
    time.sleep(0.5)
    busy = run(300)
    stop.set()
    for t in pollers:
        t.join(5)
    ratio = busy / quiet
    # The master's own CPU per /status answer (what the issue measured at ~4 ms): judged on
    # that, since publish p50 at this small scale moves with the shared box's noise.
    def master_cpu_s():
        fields = open(f"/proc/{b.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    before = master_cpu_s()
    for _ in range(300):
        get_body(b.port, "/status")
    per_request_ms = (master_cpu_s() - before) / 300 * 1000
    report("item4 /status cost", "125 MiB history; 300 x /status; 16 pollers beside 300 publishes",
           "master CPU < 0.5 ms per /status", f"{per_request_ms:.3f} ms CPU per /status; publish "
           f"p50 {quiet:.3f} ms quiet, {busy:.3f} ms polled ({ratio:.2f}x)",
           per_request_ms < 0.5)


def item7_sigterm_drain():
    global silent_losses
    # --max-unsent above what is queued: this case is about the drain, not the slow-consumer cap.
    e = Serve("drain", PORT + 5, "--workers", "1", "--grace", "10s", "--max-unsent", "33554432")
    r = SseReader(e.port, "drain", paused=True)
    time.sleep(0.3)
    ids = [publish(e.port, "drain", b"d" * 32 * 1024)[1] for _ in range(200)]
    e.proc.send_signal(signal.SIGTERM)
    time.sleep(1)
    alive_after_1s = e.proc.poll() is None
    r.go.set()
    wait_for(lambda: r.closed, 10)
    code = e.proc.wait(15)
    silent_losses += len(lost_without_gap(ids, r))
    report("item7 SIGTERM with queued data", "200 x 32 KiB queued to a paused SSE reader",
           "200 messages + shutdown event, exit 0",
           f"{len(r.ids)} messages, events {r.events}, exit {code}, "
           f"{'waited' if alive_after_1s else 'exited before the data was read'}",
           len(r.ids) == 200 and "shutdown" in r.events and code == 0 and alive_after_1s)


def item8_dead_peer():
    """A subscriber in a network namespace this suite creates vanishes without a FIN."""
    ns, host, peer = f"c1m-abuse-{os.getpid()}", "10.251.7.1", "10.251.7.2"
    run = lambda *a: subprocess.run(["ip", *a], check=True, capture_output=True)
    try:
        run("netns", "add", ns)
        run("link", "add", "c1mab0", "type", "veth", "peer", "name", "c1mab1", "netns", ns)
        run("addr", "add", f"{host}/30", "dev", "c1mab0")
        run("link", "set", "c1mab0", "up")
        run("-n", ns, "addr", "add", f"{peer}/30", "dev", "c1mab1")
        run("-n", ns, "link", "set", "c1mab1", "up")
    except (OSError, subprocess.CalledProcessError) as e:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        report("item8 dead peer reaped", "-", "-", f"cannot create a netns here: {e}", False)
        return
    port = PORT + 6
    f = Serve("deadpeer", port, "--workers", "1", "--tcp-keepalive", "1s",
              "--tcp-keepalive-interval", "1s", "--tcp-keepalive-count", "2", listen=host)
    curl = subprocess.Popen(["ip", "netns", "exec", ns, "curl", "-sN", "-H",
                             "Accept: text/event-stream", f"http://{host}:{port}/sub/gone"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: f.status()["connections"]["sse"] == 1, 5)
        run("-n", ns, "addr", "flush", "dev", "c1mab1")
        gone = time.time()
        reaped = wait_for(lambda: f.status()["connections"]["sse"] == 0, 30)
        took = time.time() - gone
        dead = f.status()["refused"]["dead_peer"]
        report("item8 dead peer reaped", "SSE client in a netns, its address flushed",
               "closed within ~3 s (keepalive 1s+2x1s), counted dead_peer",
               f"{'closed' if reaped else 'still open'} after {took:.1f} s, dead_peer {dead}",
               reaped and took < 10 and dead == 1)
    finally:
        curl.kill()
        curl.wait()
        f.stop()
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", "c1mab0"], capture_output=True)


def per_ip_limits():
    """One source address past --max-conns-per-ip, another past the new-connection rate; a
    third address is not affected."""
    g = Serve("perip", PORT + 7, "--workers", "2", "--max-conns-per-ip", "5",
              "--max-new-conns-per-ip-per-sec", "20", "--per-ip-limit-loopback")
    try:
        held = []
        for _ in range(5):
            c = socket.socket()
            c.bind(("127.0.0.21", 0))
            c.connect(("127.0.0.1", g.port))
            c.sendall(b"GET /sub/ip HTTP/1.1\r\nHost: a\r\nAccept: text/event-stream\r\n\r\n")
            held.append(c)
        wait_for(lambda: g.status()["connections"]["sse"] == 5, 5)
        sixth = http(g.port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", first=True,
                     src="127.0.0.21")[0]
        other = http(g.port, b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n", first=True,
                     src="127.0.0.22")[0]
        burst = [http(g.port, b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                      first=True, src="127.0.0.23")[0] for _ in range(40)]
        # Workers push their counters every 250 ms.
        wait_for(lambda: g.status()["refused"].get("per_ip_rate", 0) >= 1, 3)
        refused = g.status()["refused"]
        for c in held:
            c.close()
        ok = (sixth == 429 and other == 200 and burst.count(429) >= 15
              and refused.get("per_ip_conns", 0) >= 1 and refused.get("per_ip_rate", 0) >= 1)
        report("per-IP limits", "6th conn from one IP (cap 5); 40 new conns/s from another "
               "(cap 20/s)", "429 for the 6th and the excess, others 200, counted",
               f"6th {sixth}, other IP {other}, burst {burst.count(200)}x200 "
               f"{burst.count(429)}x429, per_ip_conns {refused.get('per_ip_conns')}, "
               f"per_ip_rate {refused.get('per_ip_rate')}", ok)
    finally:
        g.stop()


def main():
    a = Serve("keyed", PORT, "--workers", "2", "--max-payload", "2097152", "--publish-key", KEY,
              "--ws-client-publish")
    b = Serve("open", PORT + 1, "--workers", "2")
    cases = [
        ("item1", lambda: item1_big_replay(a)),
        ("item6", lambda: item6_long_resume(a)),
        ("item3", lambda: item3_smuggling(b)),
        ("item9", lambda: item9_pipelined(b)),
        ("item5", lambda: item5_ws_publish_without_key(a)),
        ("item11-ws", lambda: item11_plain_ws_resume(a)),
        ("item4", lambda: item4_status_cost(b)),
        ("item10", lambda: item10_counters_monotonic(b)),
        ("item11-healthz", lambda: item11_healthz_master_stopped(b)),
        ("item11-second", lambda: item11_second_instance(b)),
        ("item11-payload", item11_payload_over_frame),
        ("item11-history", item11_history_bytes),
        ("item2", item2_stalled_worker),
        ("item7", item7_sigterm_drain),
        ("item8", item8_dead_peer),
        ("per-ip", per_ip_limits),
    ]
    only = os.environ.get("ONLY", "").split(",")  # e.g. ONLY=item2,item7
    try:
        for name, case in cases:
            if only != [""] and name not in only:
                continue
            try:
                case()
            except Exception as e:  # a case that errors is a failed case, not the end of the run
                report(name, "-", "-", f"error: {e!r}", False)
    finally:
        for s in servers:
            s.stop()
    failed = sum(not r[4] for r in results)
    print(f"\n{len(results)} cases, {failed} failed; worker deaths: {deaths}; "
          f"messages lost without a gap event: {silent_losses}")
    return 0 if failed == 0 and deaths == 0 and silent_losses == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
