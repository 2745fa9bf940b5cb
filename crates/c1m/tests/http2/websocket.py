"""WebSocket over HTTP/2 (RFC 8441) from independent code: python-h2 for the HTTP/2 frames and
wsproto's frame codec for the WebSocket frames inside them (Debian python3-h2, python3-wsproto),
for crates/c1m/tests/serve_http2_websocket.rs.

Usage: websocket.py MODE PORT [ARGS...] over h2c (prior knowledge) to 127.0.0.1:PORT. It prints
`ready` once its streams are open (the test then publishes) and, at the end, one JSON line with
what it saw. Every wait is bounded (client.py's DEADLINE seconds in all).

Modes:
  session        On one connection: WebSockets on /sub/alpha and /sub/beta and an SSE stream on
                 /sub/gamma. After `ready` it waits for one message on each, then publishes
                 "from client" over the alpha WebSocket and waits for it to come back, pings
                 beta and waits for the pong, and closes beta (1000) and waits for the server's
                 close frame and END_STREAM. Says the server's ENABLE_CONNECT_PROTOCOL setting,
                 statuses, messages, the pong, the close and how each stream ended.
  open SPECS     Opens one stream per entry of the JSON list SPECS ({"path", "protocol"
                 (default websocket; null: a plain CONNECT), "headers": [[name, value], ...],
                 "send": a text message to send once open}) and says for each its status,
                 body, response headers and reset code, once each has ended, been reset, or
                 answered 200; an open one also sends its message, and says the messages and
                 close frame that came within 3 s.
  stall COUNT    Two WebSockets: /sub/stall (its stream window is never reopened) and /sub/live
                 (read normally). Ends when live has COUNT messages and stall was reset; says
                 the first 8 characters of each message live got.
  goaway         One WebSocket on /sub/up; ends when the server has sent GOAWAY and ended or
                 reset the stream, or closed the connection; says the close frame it got.
"""

import json
import sys

import h2.events
import h2.settings
from wsproto.frame_protocol import FrameProtocol, Opcode

from client import connect, pump, sse  # the same HTTP/2 client as the SSE stream tests


def extended_connect(conn, path, protocol="websocket", headers=()):
    """An extended CONNECT (RFC 8441 §4); protocol None: a plain CONNECT (authority only)."""
    sid = conn.get_next_available_stream_id()
    if protocol is None:
        head = [(":method", "CONNECT"), (":authority", "127.0.0.1")]
    else:
        head = [
            (":method", "CONNECT"),
            (":protocol", protocol),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1"),
        ]
    conn.send_headers(sid, head + [tuple(h) for h in headers])
    return sid


def websocket(conn, path):
    return extended_connect(conn, path, headers=[("sec-websocket-version", "13")])


class Streams:
    """What came on each stream: status, headers, WebSocket frames (decoded by wsproto) or
    raw body, END_STREAM and RST_STREAM."""

    def __init__(self, conn, websockets):
        self.conn = conn
        self.ws = {sid: FrameProtocol(client=True, extensions=[]) for sid in websockets}
        self.status, self.headers, self.body = {}, {}, {}
        self.texts = {sid: [] for sid in websockets}
        self.partial = {}  # stream id -> (opcode, payload pieces) of a message still arriving
        self.pongs = {sid: [] for sid in websockets}
        self.closes, self.ended, self.resets = {}, set(), {}
        self.settings = {}
        self.goaway = None

    def on(self, ev):
        if isinstance(ev, h2.events.RemoteSettingsChanged):
            for code, change in ev.changed_settings.items():
                self.settings[int(code)] = change.new_value
        elif isinstance(ev, h2.events.ResponseReceived):
            self.headers[ev.stream_id] = dict(ev.headers)
            self.status[ev.stream_id] = self.headers[ev.stream_id][":status"]
        elif isinstance(ev, h2.events.DataReceived):
            if ev.flow_controlled_length:
                self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            fp = self.ws.get(ev.stream_id)
            if fp is None or self.status.get(ev.stream_id) != "200":
                self.body[ev.stream_id] = self.body.get(ev.stream_id, b"") + ev.data
                return
            for opcode, payload in self.messages(ev.stream_id, ev.data):
                if opcode == Opcode.TEXT:
                    self.texts[ev.stream_id].append(payload)
                elif opcode == Opcode.PONG:
                    self.pongs[ev.stream_id].append(payload.decode())
                elif opcode == Opcode.CLOSE:
                    self.closes[ev.stream_id] = [int(payload[0]), payload[1]]
        elif isinstance(ev, h2.events.StreamEnded):
            self.ended.add(ev.stream_id)
        elif isinstance(ev, h2.events.StreamReset):
            self.resets[ev.stream_id] = int(ev.error_code)
        elif isinstance(ev, h2.events.ConnectionTerminated):
            self.goaway = int(ev.error_code)

    def messages(self, sid, data):
        """Whole messages (opcode, payload) that `data` completes on `sid`. wsproto yields a
        frame in pieces as its bytes arrive (a 16 KiB message spans two DATA frames), each piece
        under the message's opcode; the pieces are joined here so one message counts once."""
        fp = self.ws[sid]
        fp.receive_bytes(data)
        done = []
        for frame in fp.received_frames():
            if frame.opcode.iscontrol():  # whole, and may come between a message's pieces
                done.append((frame.opcode, frame.payload))
                continue
            opcode, pieces = self.partial.get(sid) or (frame.opcode, [])
            pieces.append(frame.payload)
            if not frame.message_finished:
                self.partial[sid] = (opcode, pieces)
                continue
            self.partial.pop(sid, None)
            done.append((opcode, pieces[0][:0].join(pieces)))
        return done

    def send_ws(self, sock, sid, data):
        """Sends WebSocket bytes as DATA frames of at most the peer's frame size (the server's
        windows are opened as it reads, so 64 KiB at most is sent here without waiting)."""
        step = self.conn.max_outbound_frame_size
        for i in range(0, len(data), step):
            self.conn.send_data(sid, data[i:i + step])
        sock.sendall(self.conn.data_to_send())

    def data(self, sid):
        """The `data` of each JSON envelope received on a WebSocket."""
        return [json.loads(t)["data"] for t in self.texts[sid]]

    def sse_data(self, sid):
        raw = self.body.get(sid, b"").decode()
        return [l[6:] for l in raw.split("\n") if l.startswith("data: ")]


def mode_session(port):
    sock, conn = connect(port)
    alpha = websocket(conn, "/sub/alpha")
    beta = websocket(conn, "/sub/beta")
    gamma = sse(conn, "gamma")
    sock.sendall(conn.data_to_send())
    s = Streams(conn, [alpha, beta])
    ok = pump(sock, conn, lambda: len(s.status) == 3, s.on)
    print("ready", flush=True)
    ok = ok and pump(
        sock, conn, lambda: s.texts[alpha] and s.texts[beta] and s.sse_data(gamma), s.on
    )
    if ok:
        s.send_ws(sock, alpha, s.ws[alpha].send_data("from client", fin=True))
        s.send_ws(sock, beta, s.ws[beta].ping(b"are you there"))
        ok = pump(sock, conn, lambda: len(s.texts[alpha]) >= 2 and s.pongs[beta], s.on)
    if ok:
        s.send_ws(sock, beta, s.ws[beta].close(1000, "bye"))
        ok = pump(sock, conn, lambda: beta in s.closes and (beta in s.ended or beta in s.resets), s.on)
    print(json.dumps({
        "complete": bool(ok),
        "enable_connect_protocol": s.settings.get(int(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL)),
        "status": {"alpha": s.status.get(alpha), "beta": s.status.get(beta), "gamma": s.status.get(gamma)},
        "accept_header": "sec-websocket-accept" in s.headers.get(alpha, {}),
        "data": {"alpha": s.data(alpha), "beta": s.data(beta), "gamma": s.sse_data(gamma)},
        "pong": s.pongs[beta],
        "close": s.closes.get(beta),
        "beta_ended": beta in s.ended,
        "beta_reset": s.resets.get(beta),
        "alpha_reset": s.resets.get(alpha),
        "alpha_close": s.closes.get(alpha),
    }), flush=True)


def mode_open(port, specs):
    specs = json.loads(specs)
    sock, conn = connect(port, validate=False)
    sids = [extended_connect(conn, sp["path"], sp.get("protocol", "websocket"), sp.get("headers", [])) for sp in specs]
    sock.sendall(conn.data_to_send())
    s = Streams(conn, sids)
    settled = lambda sid: sid in s.ended or sid in s.resets or s.status.get(sid) == "200"
    ok = pump(sock, conn, lambda: all(settled(sid) for sid in sids), s.on)
    print("ready", flush=True)
    # A WebSocket that opened: its message out, then the first message or close that comes.
    opened = [sid for sid in sids if s.status.get(sid) == "200"]
    for sid, sp in zip(sids, specs):
        if sid in opened and "send" in sp:
            s.send_ws(sock, sid, s.ws[sid].send_data(sp["send"], fin=True))
    pump(sock, conn, lambda: all(s.texts[sid] or sid in s.closes for sid in opened), s.on, deadline=3)
    print(json.dumps({
        "complete": bool(ok),
        "streams": [{
            "status": s.status.get(sid),
            "body": s.body.get(sid, b"").decode(errors="replace"),
            "headers": s.headers.get(sid, {}),
            "reset": s.resets.get(sid),
            "ended": sid in s.ended,
            "texts": s.texts[sid],
            "close": s.closes.get(sid),
        } for sid in sids],
    }), flush=True)


def mode_stall(port, count):
    count = int(count)
    sock, conn = connect(port)
    stall = websocket(conn, "/sub/stall")
    live = websocket(conn, "/sub/live")
    sock.sendall(conn.data_to_send())
    s = Streams(conn, [stall, live])
    stalled = [0]

    def on(ev):
        # The connection's window is given back at once for both streams, live's own window
        # too (so live never lags behind the publisher), the stalled stream's never.
        if isinstance(ev, h2.events.DataReceived):
            n = ev.flow_controlled_length
            if n:
                conn.increment_flow_control_window(n)
            if ev.stream_id == stall:
                stalled[0] += n
                return
            if n:
                conn.increment_flow_control_window(n, stream_id=live)
            s.texts[live].extend(p for op, p in s.messages(live, ev.data) if op == Opcode.TEXT)
            return
        s.on(ev)

    ok = pump(sock, conn, lambda: len(s.status) == 2, on)
    print("ready", flush=True)
    ok = ok and pump(sock, conn, lambda: stall in s.resets and len(s.texts[live]) >= count, on)
    print(json.dumps({
        "complete": bool(ok),
        "live": len(s.texts[live]),
        "live_heads": [d[:8] for d in s.data(live)],
        "stall_reset": s.resets.get(stall),
        "live_reset": s.resets.get(live),
        "stalled_bytes": stalled[0],
    }), flush=True)


def mode_goaway(port):
    sock, conn = connect(port)
    up = websocket(conn, "/sub/up")
    sock.sendall(conn.data_to_send())
    s = Streams(conn, [up])
    pump(sock, conn, lambda: up in s.status, s.on)
    print("ready", flush=True)
    pump(sock, conn, lambda: s.goaway is not None and (up in s.ended or up in s.resets), s.on)
    print(json.dumps({
        "status": s.status.get(up),
        "goaway": s.goaway,
        "close": s.closes.get(up),
        "ended": up in s.ended,
        "reset": s.resets.get(up),
    }), flush=True)


def main():
    mode, port = sys.argv[1], int(sys.argv[2])
    modes = {
        "session": mode_session,
        "open": mode_open,
        "stall": mode_stall,
        "goaway": mode_goaway,
    }
    modes[mode](port, *sys.argv[3:])


if __name__ == "__main__":
    main()
