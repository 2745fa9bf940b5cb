"""An independent HTTP/2 client (python-h2, Debian python3-h2) for crates/c1m/tests/serve_http2.rs.

Usage: client.py MODE PORT [ARGS...] over h2c (prior knowledge) to 127.0.0.1:PORT. It prints
`ready` once its streams are open (the test then publishes) and, at the end, one JSON line with
what it saw. Every wait is bounded (DEADLINE seconds in all).

Modes:
  streams N SHARED   N SSE streams on channels c0..c{N-1} and SHARED more on channel `shared`;
                     once all are open, stream c0 is reset by the client. Ends when every other
                     stream has one message.
  rapid_reset COUNT  opens and at once resets COUNT streams; ends at GOAWAY or close.
  oversize TOTAL DECLARE
                     POST /pub/big with a TOTAL-byte body in 1000-byte DATA frames as the
                     windows allow (with content-length: TOTAL if DECLARE is 1). Ends when the
                     stream is reset or the body is all sent; says the status, the reset code
                     and the body bytes sent.
  goaway             one SSE stream on channel `up`; ends when the server has sent GOAWAY and
                     ended or reset the stream, or closed the connection; says what came.
  gated              SSE streams on `slow`, `deny` and `live` (the test's backend proxies hold
                     `slow` and refuse `deny`); `ready` once each has its status; ends when
                     `slow` and `live` have one message each. Says the statuses in the order
                     they came, the bodies and the resets.
  stall COUNT        two SSE streams: `stall` (its window is never reopened) and `live` (read
                     normally). Ends when `live` has COUNT messages and `stall` was reset.
"""

import json
import socket
import sys
import time

import h2.config
import h2.connection
import h2.events

DEADLINE = 20.0


def connect(port, validate=True):
    """`validate` False: python-h2 sends header blocks it would refuse (a plain CONNECT)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn = h2.connection.H2Connection(
        h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8", validate_outbound_headers=validate
        )
    )
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    return sock, conn


def sse(conn, channel):
    sid = conn.get_next_available_stream_id()
    conn.send_headers(
        sid,
        [
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", "127.0.0.1"),
            (":path", "/sub/" + channel),
            ("accept", "text/event-stream"),
        ],
        end_stream=True,
    )
    return sid


def pump(sock, conn, until, on_event, deadline=DEADLINE):
    """Reads and handles events until `until()` or the deadline; False on timeout or close."""
    end = time.monotonic() + deadline
    sock.settimeout(0.2)
    while not until():
        if time.monotonic() > end:
            return False
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionError:
            return False
        if not data:
            return False
        for ev in conn.receive_data(data):
            on_event(ev)
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
    return True


class Collected:
    """An event handler for `pump`: what came on each stream of `names` (stream id -> name):
    its status, the order the heads came in, its body and its RST_STREAM code; window credit
    goes back as DATA arrives."""

    def __init__(self, conn, names):
        self.conn, self.names = conn, names
        self.status, self.order, self.resets = {}, [], {}
        self.body = {sid: b"" for sid in names}

    def __call__(self, ev):
        if isinstance(ev, h2.events.ResponseReceived):
            self.status[ev.stream_id] = dict(ev.headers)[":status"]
            self.order.append(self.names[ev.stream_id])
        elif isinstance(ev, h2.events.DataReceived):
            self.body[ev.stream_id] += ev.data
            self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            self.resets[ev.stream_id] = int(ev.error_code)


def data_lines(raw):
    return [l[6:] for l in raw.decode().split("\n") if l.startswith("data: ")]


def mode_streams(port, n, shared):
    sock, conn = connect(port)
    names = {}
    for i in range(n):
        names[sse(conn, "c%d" % i)] = "c%d" % i
    for j in range(shared):
        names[sse(conn, "shared")] = "shared#%d" % j
    sock.sendall(conn.data_to_send())
    got = Collected(conn, names)
    ok = pump(sock, conn, lambda: len(got.status) == len(names), got)
    first = min(names)
    conn.reset_stream(first)
    sock.sendall(conn.data_to_send())
    print("ready", flush=True)
    others = [sid for sid in names if sid != first]
    ok = ok and pump(sock, conn, lambda: all(data_lines(got.body[s]) for s in others), got)
    print(json.dumps({
        "complete": ok,
        "status": {names[s]: v for s, v in got.status.items()},
        "data": {names[s]: data_lines(b) for s, b in got.body.items()},
        "resets": {names[s]: c for s, c in got.resets.items()},
    }), flush=True)


def mode_rapid_reset(port, count):
    sock, conn = connect(port)
    got = {}

    def on(ev):
        if isinstance(ev, h2.events.ConnectionTerminated):
            got["goaway"] = int(ev.error_code)

    for _ in range(count):
        sid = sse(conn, "rr")
        conn.reset_stream(sid)
    try:
        sock.sendall(conn.data_to_send())
    except ConnectionError:
        pass
    print("ready", flush=True)
    pump(sock, conn, lambda: "goaway" in got, on)
    print(json.dumps(got), flush=True)


def mode_stall(port, count):
    sock, conn = connect(port)
    stall = sse(conn, "stall")
    live = sse(conn, "live")
    sock.sendall(conn.data_to_send())
    status, lines, resets, stalled_bytes = {}, b"", {}, [0]

    def on(ev):
        nonlocal lines
        if isinstance(ev, h2.events.ResponseReceived):
            status[ev.stream_id] = dict(ev.headers)[":status"]
        elif isinstance(ev, h2.events.DataReceived):
            n = ev.flow_controlled_length
            # The connection's window is given back for both; the stalled stream's never is.
            if n:
                conn.increment_flow_control_window(n)
            if ev.stream_id == live:
                lines += ev.data
                if n:
                    conn.increment_flow_control_window(n, stream_id=live)
            else:
                stalled_bytes[0] += n
        elif isinstance(ev, h2.events.StreamReset):
            resets[ev.stream_id] = int(ev.error_code)

    ok = pump(sock, conn, lambda: len(status) == 2, on)
    print("ready", flush=True)
    ok = ok and pump(
        sock, conn, lambda: stall in resets and len(data_lines(lines)) >= count, on
    )
    print(json.dumps({
        "complete": ok,
        "live": len(data_lines(lines)),
        "stall_reset": resets.get(stall),
        "live_reset": resets.get(live),
        "stalled_bytes": stalled_bytes[0],
    }), flush=True)


def mode_oversize(port, total, declare):
    sock, conn = connect(port)
    sid = conn.get_next_available_stream_id()
    head = [
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "127.0.0.1"),
        (":path", "/pub/big"),
    ]
    if declare:
        head.append(("content-length", str(total)))
    conn.send_headers(sid, head)
    sock.sendall(conn.data_to_send())
    print("ready", flush=True)
    got = {"sent": 0}

    def on(ev):
        if isinstance(ev, h2.events.ResponseReceived):
            got["status"] = dict(ev.headers)[":status"]
        elif isinstance(ev, h2.events.StreamReset):
            got["reset"] = int(ev.error_code)
        elif isinstance(ev, h2.events.StreamEnded):
            got["ended"] = True
        elif isinstance(ev, h2.events.ConnectionTerminated):
            got["goaway"] = int(ev.error_code)

    def done():
        return "reset" in got or "goaway" in got or got["sent"] >= total

    end = time.monotonic() + DEADLINE
    sock.settimeout(0.05)
    while not done() and time.monotonic() < end:
        # Send what the windows allow, then read what came back.
        room = min(conn.local_flow_control_window(sid), total - got["sent"])
        while room >= 1000 or (room > 0 and got["sent"] + room == total):
            n = min(1000, room)
            conn.send_data(sid, b"x" * n, end_stream=got["sent"] + n == total)
            got["sent"] += n
            room -= n
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
        try:
            data = sock.recv(65536)
        except socket.timeout:
            continue
        if not data:
            break
        for ev in conn.receive_data(data):
            on(ev)
        out = conn.data_to_send()
        if out:
            sock.sendall(out)
    # Anything still coming (the answer to a body sent whole) within a short wait.
    pump(sock, conn, lambda: "status" in got and ("reset" in got or "ended" in got), on)
    print(json.dumps(got), flush=True)


def mode_goaway(port):
    sock, conn = connect(port)
    sid = sse(conn, "up")
    sock.sendall(conn.data_to_send())
    got, body = {}, [b""]

    def on(ev):
        if isinstance(ev, h2.events.ResponseReceived):
            got["status"] = dict(ev.headers)[":status"]
        elif isinstance(ev, h2.events.DataReceived):
            body[0] += ev.data
            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            got["ended"] = True
        elif isinstance(ev, h2.events.StreamReset):
            got["reset"] = int(ev.error_code)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            got["goaway"] = int(ev.error_code)

    pump(sock, conn, lambda: "status" in got, on)
    print("ready", flush=True)
    pump(sock, conn, lambda: "goaway" in got and ("ended" in got or "reset" in got), on)
    got["shutdown_event"] = b"event: shutdown" in body[0]
    print(json.dumps(got), flush=True)


def mode_gated(port):
    sock, conn = connect(port)
    names = {}
    for channel in ("slow", "deny", "live"):
        names[sse(conn, channel)] = channel
    sock.sendall(conn.data_to_send())
    got = Collected(conn, names)
    ok = pump(sock, conn, lambda: len(got.status) == len(names), got)
    print("ready", flush=True)
    held = [sid for sid in names if names[sid] != "deny"]
    ok = ok and pump(sock, conn, lambda: all(data_lines(got.body[s]) for s in held), got)
    deny = min(s for s in names if names[s] == "deny")
    print(json.dumps({
        "complete": ok,
        "status": {names[s]: v for s, v in got.status.items()},
        "order": got.order,
        "data": {names[s]: data_lines(b) for s, b in got.body.items() if names[s] != "deny"},
        "deny_body": got.body[deny].decode(errors="replace"),
        "resets": {names[s]: c for s, c in got.resets.items()},
    }), flush=True)


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    args = [int(a) for a in sys.argv[3:]]
    modes = {
        "streams": mode_streams,
        "rapid_reset": mode_rapid_reset,
        "stall": mode_stall,
        "oversize": mode_oversize,
        "goaway": mode_goaway,
        "gated": mode_gated,
    }
    modes[mode](port, *args)


if __name__ == "__main__":
    main()
