"""An independent HTTP/2 client (python-h2, Debian's python3-h2) for tests/h2_python.rs.

No sockets: bytes travel as hex lines over stdin/stdout so the test can hand them to
c1m_proto::h2::Connection and back.
  out 1: the client's first flight: preface + SETTINGS, a GET on stream 1, a POST on stream 3
         with a body and then RST_STREAM(CANCEL), and a PING.
  in  1: the server's bytes.
  out 2: JSON: what python-h2 decoded from them, and `next`: the client's second flight
         (its SETTINGS ACK, then a GET on stream 5, which must carry the HPACK table size
         update the server's SETTINGS_HEADER_TABLE_SIZE calls for).
"""

import json
import sys

import h2.config
import h2.connection
import h2.errors
import h2.events


def main():
    conn = h2.connection.H2Connection(
        config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
    )
    conn.initiate_connection()
    conn.send_headers(
        1,
        [(":method", "GET"), (":scheme", "https"), (":path", "/sub/news"),
         (":authority", "example.test"), ("accept", "text/event-stream")],
        end_stream=True,
    )
    conn.send_headers(
        3,
        [(":method", "POST"), (":scheme", "https"), (":path", "/pub/news"),
         (":authority", "example.test"), ("content-type", "text/plain")],
    )
    conn.send_data(3, b"hello")
    conn.reset_stream(3, error_code=h2.errors.ErrorCodes.CANCEL)
    conn.ping(b"c1m-ping")
    print(conn.data_to_send().hex(), flush=True)

    server = bytes.fromhex(sys.stdin.readline().strip())
    seen = []
    for ev in conn.receive_data(server):
        if isinstance(ev, h2.events.RemoteSettingsChanged):
            seen.append({"settings": {int(k): v.new_value for k, v in ev.changed_settings.items()}})
        elif isinstance(ev, h2.events.ResponseReceived):
            seen.append({"response": ev.stream_id, "headers": [list(h) for h in ev.headers]})
        elif isinstance(ev, h2.events.DataReceived):
            seen.append({"data": ev.stream_id, "body": ev.data.decode()})
            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
        elif isinstance(ev, h2.events.StreamEnded):
            seen.append({"ended": ev.stream_id})
        elif isinstance(ev, h2.events.PingAckReceived):
            seen.append({"ping_ack": ev.ping_data.decode()})
        elif isinstance(ev, h2.events.SettingsAcknowledged):
            seen.append({"settings_acked": True})
        else:
            seen.append({"other": type(ev).__name__})
    conn.send_headers(
        5,
        [(":method", "GET"), (":scheme", "https"), (":path", "/sub/second"),
         (":authority", "example.test")],
        end_stream=True,
    )
    print(json.dumps({"seen": seen, "next": conn.data_to_send().hex()}), flush=True)


if __name__ == "__main__":
    main()
